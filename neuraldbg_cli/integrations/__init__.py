"""Callbacks for the training loops that launch themselves: Lightning's Trainer and Hugging
Face's Trainer. The same engine as `neuraldbg run` (a NeuralDbg), the same trace and
`explain`; each module imports its framework, so the core never does.

    from neuraldbg_cli.integrations.lightning import NeuralDbgCallback
    from neuraldbg_cli.integrations.huggingface import NeuralDbgCallback
"""
