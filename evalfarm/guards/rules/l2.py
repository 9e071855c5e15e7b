"""Persisting L2 cache: data kept hot across timed calls. Runtime: persisting L2 is reset and
free memory poisoned between calls. Role: testifies."""

from __future__ import annotations

from evalfarm.guards.rules.base import cpp_rule

RULE_IDS = ("l2_persistence",)

CPP = (
    cpp_rule("l2_persistence", r"\bcudaLimitPersistingL2CacheSize\b|\bcudaDeviceSetLimit\b|"
             r"\bcudaStreamSetAttribute\b|\baccessPolicyWindow\b|"
             r"\bcudaCtxResetPersistingL2Cache\b|\bcudaAccessPropertyPersisting\b|"
             r"\bcuCtxSetLimit\b|\bcuStreamSetAttribute\b",
             "configures persisting L2 cache"),
)
