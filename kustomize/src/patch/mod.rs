//! Patches: strategic merge, JSON 6902, target selection, replacements and vars.
