"""bench/gpu_summary.py: a GPU session's JSON against issue 10's targets, as Markdown."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.gpu_summary import main, summary
from bench.pipeline import Row

BASE = Row(backend="torch", runner="fast", size="full", schedule="2,4,8,32", concurrency=1, frames=200, wall_s=1.0,
           xrt=1.0, rtf_p50=0.5, rtf_p99=0.5, ttfa_p50_ms=10.0, ttfa_p99_ms=10.0, ttff_p50_ms=5.0, underrun_p50_ms=0.0,
           underrun_p99_ms=0.0, step_p50_ms=1.0, step_p99_ms=1.0, steps=200, codec_s=0.1, codec_share=0.2)


def row(**changes) -> dict:
    """A row of bench/pipeline.py's JSON: BASE with ``changes``, every level's figures resting on
    ``n`` streams heard (1 unless given) and none failed."""
    return {**asdict(BASE), "n": 1, "failed": 0, **changes}


def write(out: Path, rows: list[dict], **extra) -> None:
    result = {"backend": "torch", "runner": "fast", "size": "full", "dtype": "bfloat16", "frames": 200,
              "codec_impl": "torch", "machine": "NVIDIA H200", "rows": rows, **extra}
    (out / "gpu-torch.json").write_text(json.dumps(result))


def verdicts(text: str) -> dict[str, str]:
    """target name -> 'met' / '**not met**' / '' from the targets table."""
    rows = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith("| ") and " stream" in line]
    return {cells[0].strip(): cells[3].strip() for cells in rows if len(cells) == 4}


def test_the_default_schedules_rows_are_set_against_each_target(tmp_path):
    rows = [row(concurrency=1, ttfa_p50_ms=15.0, rtf_p50=0.03),  # first audio met, RTF not
            row(concurrency=256, rtf_p99=0.4, ttfa_p99_ms=350.0, xrt=250.0, n=256),
            row(concurrency=512, rtf_p99=0.9, xrt=400.0),
            row(concurrency=1024, rtf_p99=1.3, xrt=420.0),
            # another schedule's rows (the first-audio comparison) never count for the targets
            row(schedule="8,32", concurrency=1, ttfa_p50_ms=5.0, rtf_p50=0.001)]
    write(tmp_path, rows)
    text = summary(tmp_path)
    got = verdicts(text)
    assert got["one stream: time to first audio"] == "met"
    assert got["one stream: RTF"] == "**not met**"
    assert got["256 streams: p99 RTF"] == "met"
    assert got["256 streams: TTFA p99"] == "**not met**"
    assert got["256 streams: aggregate xRT"] == "met"  # 250 > the published 203.9
    assert "| most streams with p99 RTF < 1 | (report) | 512 | |" in text
    assert "| 8,32 | 1 |" in text  # still listed with every level


def test_the_one_stream_targets_pool_every_burst_at_one_stream_and_say_on_how_many(tmp_path):
    rows = [row(concurrency=1, ttfa_p50_ms=30.0, rtf_p50=0.03),  # the first burst alone: not met
            row(concurrency=1, ttfa_p50_ms=12.0, rtf_p50=0.01),
            row(concurrency=1, ttfa_p50_ms=14.0, rtf_p50=0.015),
            row(concurrency=1, ttfa_p50_ms=float("nan"), rtf_p50=0.0, n=0, failed=1),  # never heard
            row(concurrency=1, ttfa_p50_ms=19.0, rtf_p50=0.02),
            row(concurrency=1, ttfa_p50_ms=16.0, rtf_p50=0.018),
            row(concurrency=256, rtf_p99=0.4, ttfa_p99_ms=250.0, xrt=250.0, n=255, failed=1)]
    write(tmp_path, rows)
    text = summary(tmp_path)
    got = verdicts(text)
    assert got["one stream: time to first audio"] == "met" and got["one stream: RTF"] == "met"
    assert "| one stream: time to first audio | <= 20 ms | 16 ms (n=5) | met |" in text  # p50 of 12 14 16 19 30
    assert "| one stream: RTF | <= 0.02 | 0.018 (n=5) | met |" in text
    assert "| 256 streams: TTFA p99 | < 300 ms | 250 ms (n=255) | met |" in text
    write(tmp_path, rows[:1])
    assert "| one stream: time to first audio | <= 20 ms | 30 ms (n=1: a single sample) | **not met** |" in summary(tmp_path)
    # a JSON from before bench/pipeline.py kept n: each C=1 row with a figure is still one sample
    (tmp_path / "gpu-torch.json").write_text(json.dumps({"rows": [
        {k: v for k, v in r.items() if k not in ("n", "failed")} for r in rows[1:3] + rows[-1:]]}))
    text = summary(tmp_path)
    assert "| one stream: time to first audio | <= 20 ms | 13 ms (n=2) | met |" in text
    assert "| 256 streams: TTFA p99 | < 300 ms | 250 ms (n not recorded) | met |" in text


def test_levels_not_measured_say_so_and_missing_files_are_skipped(tmp_path):
    write(tmp_path, [row(concurrency=1), row(concurrency=256, note="skipped (time budget)")])
    text = summary(tmp_path)
    assert verdicts(text)["256 streams: p99 RTF"] == ""
    assert "| 256 streams: p99 RTF | < 1 | not measured | |" in text
    assert "skipped (time budget)" in text
    assert "## engine step" not in text and "## codec" not in text  # no such JSON in the folder
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "No results in" in summary(empty)


def test_step_times_are_shown_against_their_floor_and_written_beside_the_json(tmp_path, capsys):
    fast = {"peak_gbps": 4800, "results": [
        {"path": "fast", "batch": 256, "step_ms_p50": 2.0, "read_mb": 4000.0, "floor_ms": 0.8333, "shape": "(256, 512)",
         "host_ms_p50": 1.25}]}
    (tmp_path / "torch_fast_bf16.json").write_text(json.dumps(fast))
    main([str(tmp_path)])
    text = (tmp_path / "summary.md").read_text()
    assert text == capsys.readouterr().out
    assert "at 4800 GB/s peak bandwidth" in text
    assert "| fast | on | 256 | 2.00 | 1.25 | 4000.0 | 0.833 | 2.4 | (256, 512) |" in text


def test_a_path_that_ran_the_fused_kernels_says_so(tmp_path):
    rows = [{"path": p, "batch": 1, "step_ms_p50": ms, "read_mb": 600.0, "floor_ms": 0.125, "shape": "", "fused_kernels": f}
            for p, ms, f in (("fast", 1.0, True), ("unfused", 2.5, False))]
    rows.append({**rows[0], "path": "overlap", "graphs": False})  # asked for graphs, a capture failed: eager
    prefills = [{"path": "fast", "prompts": 1, "tokens": 57, "repeats": 10, "prefill_ms_p50": 4.0, "prefill_ms_p90": 5.0,
                 "fused_kernels": True}]
    (tmp_path / "torch_fast_bf16.json").write_text(json.dumps({"peak_gbps": 4800, "results": rows, "prefills": prefills}))
    text = summary(tmp_path)
    assert "| fast (fused kernels) | on | 1 | 1.00 | - | 600.0 | 0.125 | 8.0 |  |" in text  # a JSON without host times
    assert "| unfused | on | 1 | 2.50 | - | 600.0 | 0.125 | 20.0 |  |" in text
    assert "| overlap (fused kernels; eager: a capture failed) | on | 1 | 1.00 |" in text
    assert "| fast (fused kernels) | 1 | 57 | 4.00 | 5.00 |" in text


def test_the_compiled_path_gets_its_rows_and_the_reference_is_listed_once(tmp_path):
    def row(path, batch, ms):
        return {"path": path, "batch": batch, "step_ms_p50": ms, "read_mb": 600.0, "floor_ms": 0.125, "shape": ""}

    (tmp_path / "torch_fast_bf16.json").write_text(json.dumps({"peak_gbps": 4800, "results": [
        row("reference", 1, 9.0), row("fast", 1, 3.0)]}))
    (tmp_path / "torch_fast_bf16_compiled.json").write_text(json.dumps({"peak_gbps": 4800, "results": [
        row("reference", 1, 9.1), row("compiled", 1, 1.0)], "checks": {"fast eager": True, "compiled graphs": False}}))
    (tmp_path / "torch_fast_bf16_eager.json").write_text(json.dumps({"peak_gbps": 4800, "results": [row("fast", 1, 6.0)]}))
    text = summary(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| reference") or line.startswith("| fast")
            or line.startswith("| compiled")]
    assert rows == ["| reference | - | 1 | 9.00 | - | 600.0 | 0.125 | 72.0 |  |",
                    "| fast | on | 1 | 3.00 | - | 600.0 | 0.125 | 24.0 |  |",
                    "| compiled | on | 1 | 1.00 | - | 600.0 | 0.125 | 8.0 |  |",
                    "| fast | off | 1 | 6.00 | - | 600.0 | 0.125 | 48.0 |  |"]
    assert ("frames against the reference loop (tiny checkpoint, float32): fast eager equal; compiled graphs "
            "**differ**") in text


def test_prefill_times_get_a_table_of_their_own_with_the_reference_listed_once(tmp_path):
    def prefill(path, prompts, ms):
        return {"path": path, "prompts": prompts, "tokens": 57, "repeats": 10, "prefill_ms_p50": ms,
                "prefill_ms_p90": ms + 1}

    (tmp_path / "torch_fast_bf16.json").write_text(json.dumps({"peak_gbps": 4800, "results": [], "prefills": [
        prefill("reference", 1, 12.0), prefill("fast", 1, 11.0), prefill("fast", 8, 14.0)]}))
    (tmp_path / "torch_fast_bf16_compiled.json").write_text(json.dumps({"peak_gbps": 4800, "results": [], "prefills": [
        prefill("reference", 1, 12.5), prefill("compiled", 1, 3.0)]}))
    text = summary(tmp_path)
    assert "## prefill (one prompt" in text
    rows = [line for line in text.splitlines() if line.startswith(("| reference | 1 ", "| fast | ", "| compiled | 1 "))]
    assert rows == ["| reference | 1 | 57 | 12.00 | 13.00 |", "| fast | 1 | 57 | 11.00 | 12.00 |",
                    "| fast | 8 | 57 | 14.00 | 15.00 |", "| compiled | 1 | 57 | 3.00 | 4.00 |"]
    (tmp_path / "torch_fast_bf16.json").write_text(json.dumps({"peak_gbps": 4800, "results": []}))  # an older JSON
    (tmp_path / "torch_fast_bf16_compiled.json").unlink()
    assert "## prefill" not in summary(tmp_path)


def test_the_compiled_codec_gets_its_rows_beside_the_eager_ones(tmp_path):
    codec = {"device": "cuda", "dtype": "torch.bfloat16", "size": "full", "fp32_device_vs_cpu": 1e-6,
             "run_dtype_vs_fp32": {"snr_db": 40.0}, "streaming_vs_whole": 0.0,
             "timings": [{"batch": 1, "width": 27, "ms": 6.0, "audio_s_per_s": 20.0}], "compile_s": 31.4,
             "compiled": [{"batch": 1, "width": 2, "eager_ms": 5.5, "compiled_ms": 1.25, "max_abs_vs_eager": 0.0039}]}
    (tmp_path / "torch_codec_full.json").write_text(json.dumps(codec))
    text = summary(tmp_path)
    assert "compiled (GEPARD_CODEC_COMPILE; compiled in 31.4 s), one window:" in text
    assert "| 2 | 5.50 | 1.25 | 0.003900 |" in text
    del codec["compiled"]
    (tmp_path / "torch_codec_full.json").write_text(json.dumps(codec))
    assert "GEPARD_CODEC_COMPILE" not in summary(tmp_path)


def test_the_codec_carrying_state_gets_its_rows_beside_the_windowed_ones(tmp_path):
    codec = {"device": "cuda", "dtype": "torch.bfloat16", "size": "full", "timings": [], "streaming": [
        {"mode": mode, "schedule": "2,4,8,32", "streams": 64, "frames": 120, "decode_s": s, "decode_s_per_audio_s": s / 356.6,
         "calls": 30, "max_abs_vs_whole": 0.0039} for mode, s in (("windowed", 2.5), ("carried", 1.25))]}
    (tmp_path / "torch_codec_full.json").write_text(json.dumps(codec))
    text = summary(tmp_path)
    assert "64 streams x 120 frames, schedule 2,4,8,32, windowed against carrying conv state" in text
    assert "| windowed | 2.50 | 0.007 | 30 | 0.003900 |" in text and "| carried | 1.25 | 0.004 | 30 | 0.003900 |" in text


def test_each_pipeline_table_says_what_it_ran_with(tmp_path):
    write(tmp_path, [row(concurrency=1)])
    result = json.loads((tmp_path / "gpu-torch.json").read_text())
    result.update(runner="fast path (CUDA graphs)", codec_impl="torch", codec_cuda_graphs="on (64 shapes)",
                  codec_carry_state=False, codec_fused_activations=True, torch_fused_kernels=True, torch_overlap=True,
                  torch_prefill_batch=8, torch_stream_priority="high", engine_cuda_graphs=False)
    (tmp_path / "gpu-torch.json").write_text(json.dumps(result))
    assert ("ran with: fast path (CUDA graphs), codec torch; codec CUDA graphs on (64 shapes); codec carrying conv "
            "state off; codec fused activations on; fused engine kernels on; engine CUDA graphs off; overlapped steps "
            "on; prefill batch 8; engine stream priority high") in summary(tmp_path)
    del result["codec_fused_activations"], result["torch_fused_kernels"], result["engine_cuda_graphs"]  # a JSON from
    (tmp_path / "gpu-torch.json").write_text(json.dumps(result))  # before the settings: nothing said
    assert "fused" not in summary(tmp_path) and "engine CUDA graphs" not in summary(tmp_path)


def test_fused_activations_get_their_rows_beside_the_eager_decodes(tmp_path):
    codec = {"device": "cuda", "dtype": "torch.bfloat16", "size": "full", "timings": [], "fused": {
        "activations": 96, "max_abs_vs_eager": 0.0078, "max_abs_vs_fp32": 0.0039, "bound_vs_fp32": 0.0078,
        "timings": [{"batch": 1, "width": 27, "eager_ms": 22.6, "fused_ms": 9.5},
                    {"batch": 128, "width": 57, "eager_ms": 400.0, "fused_ms": None}],
        "streaming": {"mode": "carried, fused", "streams": 64, "frames": 120, "decode_s": 1.0,
                      "decode_s_per_audio_s": 0.0028, "max_abs_vs_whole": 0.0039}}}
    (tmp_path / "torch_codec_full.json").write_text(json.dumps(codec))
    text = summary(tmp_path)
    assert "fused activations (GEPARD_CODEC_FUSED_ACTIVATIONS; 96 snake activations, one Triton kernel each)" in text
    assert "| 1 | 27 | 22.60 | 9.50 |" in text and "| 128 | 57 | 400.00 | - |" in text  # None: out of memory
    assert ("64 streams carrying conv state, fused; their state read eagerly (not fused): decoder busy 1.00 s "
            "(0.003 per audio s)") in text  # a run from before the state had a kernel
    codec["fused"]["state_convs"] = 97
    (tmp_path / "torch_codec_full.json").write_text(json.dumps(codec))
    assert ("64 streams carrying conv state, fused; their state read by one kernel per conv (97 convs): decoder busy "
            "1.00 s") in summary(tmp_path)
    (tmp_path / "torch_codec_full.json").write_text(json.dumps({**codec, "fused": {"skipped": "no Triton"}}))
    assert "fused activations (GEPARD_CODEC_FUSED_ACTIVATIONS): not run (no Triton)" in summary(tmp_path)


def test_the_gateways_event_loop_is_set_against_the_published_aggregate(tmp_path):
    loop = {"machine": "Xeon, 16 cores, NVIDIA H200", "backend": "torch", "results": [
        {"agents": 64, "audio_s": 500.0, "loop_ms_per_audio_s": 4.0, "process_ms_per_audio_s": 30.0, "load": {"xrt": 50.0}}]}
    (tmp_path / "loop_cost_gpu.json").write_text(json.dumps(loop))
    text = summary(tmp_path)
    assert "## the gateway's event loop on this machine" in text and "published 203.9x" in text
    assert "| 64 | 500.0 | 50.00 | 4.00 | 250x | 30.0 |" in text  # 1000 / 4 ms per audio second


def test_the_pipeline_carrying_codec_state_gets_its_own_targets_table(tmp_path):
    write(tmp_path, [row(concurrency=256, rtf_p99=1.05, xrt=240.0, n=256)])
    carried = {"backend": "torch", "runner": "fast", "size": "full", "dtype": "bfloat16", "frames": 200,
               "codec_impl": "torch", "codec_carry_state": True, "machine": "NVIDIA H200",
               "rows": [row(concurrency=256, rtf_p99=0.8, xrt=300.0, n=256)]}
    (tmp_path / "gpu-torch-carry.json").write_text(json.dumps(carried))
    text = summary(tmp_path)
    assert text.index("## torch: targets") < text.index("## torch, codec carrying conv state: targets")
    tables = text.split("## torch, codec carrying conv state: targets")
    assert verdicts(tables[0])["256 streams: p99 RTF"] == "**not met**"
    assert verdicts(tables[1])["256 streams: p99 RTF"] == "met"
    (tmp_path / "gpu-torch-prefill8.json").write_text(json.dumps({**carried, "torch_prefill_batch": 8, "rows": [
        row(concurrency=256, rtf_p99=0.8, ttfa_p99_ms=250.0, xrt=300.0, n=256)]}))
    last = summary(tmp_path).split("## torch, codec carrying conv state, 8 prefills a step: targets")[1]
    assert verdicts(last)["256 streams: TTFA p99"] == "met"
