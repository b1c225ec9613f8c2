"""The explaining wing: from traces alone to ranked causal hypotheses. Never imports torch,
so a trace from CI can be explained on any machine."""
