"""`python -m learner ...` = the `learner` console script."""

from learner.cli import main

raise SystemExit(main())
