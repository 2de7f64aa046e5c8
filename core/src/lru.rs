//! A small least-recently-used map, for caches of a few expensive values (HTTP clients built
//! per TLS and proxy settings: building one parses the platform's CA roots).

use std::collections::HashMap;
use std::hash::Hash;

/// At most `capacity` entries; inserting beyond that drops the least recently used one.
#[derive(Debug)]
pub struct Lru<K, V> {
    entries: HashMap<K, (V, u64)>,
    tick: u64,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> Lru<K, V> {
    /// An empty map holding at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Self {
        Lru {
            entries: HashMap::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    /// The value of `key`, marked as just used.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    /// Inserts (or replaces) `key`, dropping the least recently used entry when full.
    pub fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        if !self.entries.contains_key(&key)
            && self.entries.len() >= self.capacity
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
        {
            self.entries.remove(&oldest);
        }
        self.entries.insert(key, (value, self.tick));
    }

    /// Removes `key`, giving its value back.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.entries.remove(key).map(|(v, _)| v)
    }

    /// How many entries are held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// An error and its sources, joined with `: ` (a source repeating its parent's text is left
/// out).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let m = s.to_string();
        if parts.last() != Some(&m) {
            parts.push(m);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let mut c = Lru::new(2);
        c.insert("a", 1);
        c.insert("b", 2);
        assert_eq!(c.get(&"a"), Some(1));
        c.insert("c", 3);
        assert_eq!(c.get(&"b"), None, "b was the least recently used");
        assert_eq!((c.get(&"a"), c.get(&"c")), (Some(1), Some(3)));
        c.insert("a", 10);
        assert_eq!((c.len(), c.get(&"a")), (2, Some(10)));
        assert_eq!(c.remove(&"a"), Some(10));
        assert_eq!((c.len(), c.get(&"a"), c.remove(&"a")), (1, None, None));
    }

    #[test]
    fn chains_skip_repeated_sources() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "outer",
            Some(Box::new(E("outer", Some(Box::new(E("inner", None)))))),
        );
        assert_eq!(error_chain(&e), "outer: inner");
    }
}
