"""Inspecting a run from its workdir alone: `inspector` (`inspect_run`, `continue_prompt`), `report` the numbers (pure
NumPy), `text` their text and Markdown, `plots` the pictures, `cli` the command line."""
