"""science/common.py: the CPU reader the sweeps, scripts/results.py and the benchmarks share, and the Markdown
blocks they rewrite."""

from science import common


def test_cpu_reads_the_first_processors_name_and_flags(tmp_path):
  cpuinfo = tmp_path / "cpuinfo"
  cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx512f amx_tile\n\n"
                     "processor\t: 1\nmodel name\t: another\nflags\t\t: fpu\n")
  assert common.cpu(cpuinfo) == ("Intel(R) Xeon(R) Processor", {"fpu", "avx512f", "amx_tile"})
  name, flags = common.cpu(tmp_path / "absent")
  assert name and flags == set()


def test_a_block_is_replaced_between_its_markers_and_nothing_else_changes(tmp_path):
  text = "head <!-- x -->old<!-- /x --> middle <!-- x -->second<!-- /x --> tail"
  assert common.block(text, "<!-- x -->", "<!-- /x -->") == "old"
  assert common.replace_block(text, "<!-- x -->", "<!-- /x -->", "\nnew\n") == (
      "head <!-- x -->\nnew\n<!-- /x --> middle <!-- x -->second<!-- /x --> tail")
  assert common.replace_block("<!-- /x --> <!-- x -->", "<!-- x -->", "<!-- /x -->", "new") is None  # no end after
  page = tmp_path / "page.md"
  assert not common.rewrite_block(page, "<!-- x -->", "<!-- /x -->", "new") and not page.exists()
  page.write_text("no markers\n")
  assert not common.rewrite_block(page, "<!-- x -->", "<!-- /x -->", "new")
  assert page.read_text() == "no markers\n"
  page.write_text(text)
  assert common.rewrite_block(page, "<!-- x -->", "<!-- /x -->", "new")
  assert page.read_text() == text.replace("old", "new", 1)
