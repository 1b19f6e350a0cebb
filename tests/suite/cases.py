"""The cases the suite runs: every ``SuiteCase`` of every tip of the registry."""

from __future__ import annotations

from suite.harness import Entry, registry_entries

ENTRIES: list[Entry] = registry_entries()
BY_ID: dict[str, Entry] = {e.id: e for e in ENTRIES}
assert len(BY_ID) == len(ENTRIES), "two suite cases of one tip share a name"
