"""`dlprobe run` on a dataset whose `__getitem__` fills a dict cache: the allocation finding names the attribute each
real worker grew and says that each epoch's new workers begin it again; its fixed twin and a cache the dataset does
not hold get no such words."""

from __future__ import annotations

import json

MiB = 1024 * 1024
ATTRIBUTE_WORDS = ("`self.", "grew from", "thrown away", "grows in each")


def _attr_events(result) -> list[dict]:
    lines = (result.run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["ev"] == "worker_attrs"]


def test_a_dict_cache_filled_in_each_worker_is_named_with_its_loss_at_each_epochs_end(probe):
    result = probe("dict_cache_each_epoch.py")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    evidence = finding["evidence"]
    assert evidence["variant"] == "allocating"
    [grown] = evidence["growing_attributes"]
    # 768 samples, 2 workers, 3 epochs of fresh workers: each worker decodes its 384 samples into its own cache
    assert grown["attribute"] == "self.cache"
    assert grown["workers"] == grown["grown_workers"] == 6 and grown["epochs"] == 3
    assert grown["start_items_min"] == grown["start_items_max"] == 0
    assert grown["end_items_min"] == grown["end_items_max"] == 384
    assert grown["items_per_sample"] == 1.0 and grown["fate"] == "thrown_away"
    assert "(`self.cache` grows in each)" in finding["title"]
    assert "`self.cache` grew from 0 to 384 items in each of the 6 workers (1 per sample fetched)" in finding["detail"]
    assert "each epoch's new workers begin it again" in finding["detail"]
    assert "thrown away at each epoch's end" in finding["detail"]
    assert "Fill `self.cache` in the parent before the DataLoader is built" in finding["fix"]
    assert "persistent_workers=True" in finding["fix"]
    assert "self.cache" in result.stderr  # the terminal's verdict names it too
    # the readings behind it: every worker read at its start and at its end, its batches counted
    events = _attr_events(result)
    ends = [e for e in events if e["phase"] == "end"]
    assert len({e["pid"] for e in events}) == 6 and len(ends) == 6
    assert all(e["attrs"] == {"self.cache": 384} and e["batches"] == 24 for e in ends)


def test_the_cache_filled_before_the_loader_is_built_gets_no_growth_words(probe):
    result = probe("dict_cache_each_epoch.py", "filled-first")
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    text = json.dumps(result.report["findings"])
    assert not any(word in text for word in ATTRIBUTE_WORDS), text
    events = _attr_events(result)
    assert events and all(e["attrs"] == {"self.cache": 768} for e in events)  # counted, never grown


def test_growth_the_dataset_does_not_hold_names_no_attribute(probe):
    result = probe("dict_cache_each_epoch.py", "module-cache")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    assert finding["evidence"]["variant"] == "allocating"
    assert "growing_attributes" not in finding["evidence"]
    words = finding["title"] + finding["detail"] + finding["fix"]
    assert not any(word in words for word in ATTRIBUTE_WORDS), words
    assert "Look for state that grows in __getitem__" in finding["fix"]


def test_persistent_workers_each_keep_their_own_cache_and_are_told_to_bound_it(probe):
    result = probe("dict_cache_each_epoch.py", "persistent")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    [grown] = finding["evidence"]["growing_attributes"]
    # the same 2 workers all 3 epochs: each began at 0 once and kept what it decoded (more than one epoch's 384). They
    # are stopped at the script's exit without their last reading: the last tick (a second apart) was in a later epoch
    assert (grown["workers"], grown["fate"]) == (2, "kept") and grown["epochs"] >= 2
    assert grown["start_items_max"] == 0 and 384 < grown["end_items_min"] <= 768
    assert "the workers are persistent, so each keeps its own cache from epoch to epoch" in finding["detail"]
    assert "thrown away" not in finding["detail"] and finding["fix"].startswith("Bound `self.cache`")
