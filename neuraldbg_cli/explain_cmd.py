"""Placeholder until the explain command lands."""


def explain_traces(paths, as_json=False, fail_on=None) -> int:
    raise NotImplementedError
