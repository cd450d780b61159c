"""Inspecting a finished or running training run from its workdir alone.

- `run`: `inspect_run(workdir, ...)`, the library call: restore, read the data facts and events, build the report;
- `report`: the numbers, pure NumPy over the tables;
- `text`: the report as plain text and Markdown;
- `plots`: its pictures (PNG and TensorBoard images); `files`: writing only inside WORKDIR/report/;
- `continuation`: `continue_prompt`, what a text run says follows a string (--next, --generate);
- `cli`: `python -m tied_embed.inspection`.
"""
