"""Inspecting a finished or running training run from its workdir alone.

`inspector.inspect_run(workdir, ...)` is the library call; `report` the numbers (pure NumPy), `text` their plain
text and Markdown, `plots` the pictures, `files` writing only inside WORKDIR/report/, `continuation` what a text
run says follows a string (--next, --generate), `cli` the command line.
"""
