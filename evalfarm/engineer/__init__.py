"""What a kernel engineer runs beside one score: a whole run of candidates scored, resumed and
summarised (batch, batch_resume, batch_score), and baselines synthesised from the task itself."""
