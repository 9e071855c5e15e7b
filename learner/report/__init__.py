"""What a run writes about itself: the metrics sink of every step (metrics), the paper's speedup
tables, verdict table and plot (speedups), what the evaluation samples say beyond those tables
(stage_notes: programs emitted, stage-to-stage moves) and the bootstrap intervals they use
(stats). Plain data in, files and text out: nothing here runs a model or talks to the farm."""
