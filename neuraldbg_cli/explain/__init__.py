"""The explaining wing: from traces alone to ranked causal hypotheses. Never imports torch,
so a trace from CI can be explained on any machine.

runs (a trace digested) -> episodes (unhealthy stretches) -> echoes (which failure caused
which) and rules (what started a story) -> hypothesis (a story explained, in the words of
evidence) -> analysis (the ranking, the JSON) -> report and timeline (rich). What a state
means (severity, letter, colour, verb, default fix) comes from neuraldbg_cli.states."""
