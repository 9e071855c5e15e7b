"""What RL over the farm is made of, stage loops aside: the task set and its known programs
(tasks), prompt templates and response parsing (prompts), sampling prompts into parsed
rollouts and padded batches (rollout), the farm client and owned local daemons (farm), the
exemplar database and its bucket sampler (exemplars), the GRPO advantages and loss (grpo) and
the KL term's frozen reference policy (reference). The learner reaches `evalfarm` only through
this package, and only its client side (docs/architecture.md)."""
