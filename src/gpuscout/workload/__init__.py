"""The job and its model: job specs, model shapes, presets, shipped examples, shape-only formulas.

`job` maps TOML specs onto typed models; `jobs` turns a path, an example name or nothing into a
job and resolves its model (`resolve`, `validate`); `shape`, `hf_config`, `hf_families`,
`checkpoint` and `presets` describe language models, `image` diffusion models; `flops` and `lora`
hold the formulas that follow from a shape alone.

May import: `hardware` and the leaf modules.
"""
