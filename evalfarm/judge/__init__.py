"""The trusted judge and the untrusted candidate worker it drives."""
