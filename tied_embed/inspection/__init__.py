"""Inspecting a finished or running training run from its workdir alone.

`inspector` holds the library calls (`inspect_run`, the report; `continue_prompt`, what a text run says follows a
string), `report` the numbers (pure NumPy), `text` their plain text and Markdown, `plots` the pictures, `cli` the
command line.
"""
