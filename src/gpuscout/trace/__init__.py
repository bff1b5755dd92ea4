"""Memory traces: one real step of the job's model under PyTorch's FakeTensorMode, nothing allocated.

`trace.llm` traces a transformers training step or a prefill + decode step, `trace.image` a
diffusers denoiser forward and VAE decode; `trace.memtrace` holds the MemTracker with
per-category peaks both use. The models come from `torchmodel`, the same builder the bench uses.
The trace is the estimator's oracle: `gpuscout estimate --trace` sets it beside the analytic figures;
`trace.scope` says what such a trace covers (one device, the traced depth) so exactly that is estimated.

May import: `torchmodel`, `workload`, `hardware` and the leaf modules. torch is imported inside
functions only.
"""
