"""The job's real model, built with torch: transformers causal LMs and diffusers image models.

One builder serves both tools that run real model code: the timed bench (`gpuscout.measure`,
real tensors on the CPU or a GPU) and the memory trace (`gpuscout.trace`, the meta device made
fake). Keeping a single builder means both see the same architecture, dtype, attention kernel,
adapters and optimizer for the same job.

May import: `workload`, `hardware` and the leaf modules. torch, transformers, peft, diffusers and
bitsandbytes are imported inside functions only, so importing this package is cheap.
"""
