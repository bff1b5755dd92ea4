"""The HTML report: one self-contained, offline file from any of gpuscout's outputs.

`page` assembles the document (style, Content-Security-Policy, sources, footer) and picks a view
per input: `estimate`, `pick`, `compare`, `runs` (bench and load on shared axes; `load` adds the
serving views) and `checks` (doctor, probe and any other kind). `svg` draws every plot as inline
SVG and `parts` holds the escaped building blocks (`Html`, tables, notes) the views share.
"""
