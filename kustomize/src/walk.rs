//! Walking a kustomization tree. A kustomization includes others through `resources` (bases),
//! `components` and `transformers` (directories whose objects configure transformers).
//!
//! The walk keeps the kustomizations being built on its own stack of frames instead of the
//! thread's stack, so a deep chain of bases needs no more thread stack than a shallow one; its
//! depth is bounded by the build's budget.
//!
//! A base's result does not depend on who includes it (it starts from an empty accumulator),
//! so a base included along several paths (a diamond: two overlays of one base, each included
//! again by two overlays, ...) is built at most twice: from its second inclusion on, its result
//! is remembered and copied. Two things outside the base can still change its result, and a
//! remembered result is only reused when neither did: the build's schema (`openAPI` and `crds`
//! change it for the rest of the build), and cycle detection (a base may not include a
//! directory that contains a kustomization being built, which depends on the includer's
//! ancestors).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::acc::{Acc, Ctx};
use crate::budget::approx_size;
use crate::error::{KustomizeError, Result};
use crate::item::Item;
use crate::kustomization::{Kustomization, load_kustomization};
use crate::loader::{Loader, is_remote};
use crate::objects::{load_items, load_objects, relative_to};
use crate::pipeline::{configure_and_generate, load_openapi, run_builtin_transformers};
use crate::plugins::run_transformer_docs;
use crate::yaml::parse_stream;

/// Accumulates the tree rooted at the kustomization `k` of `ldr`'s directory.
pub(crate) fn accumulate_tree(ldr: &Loader, k: &Kustomization, ctx: &mut Ctx) -> Result<Acc> {
    let meter = ldr.meter();
    let mut walk = Walk::default();
    walk.enter(&ldr.root);
    let id = walk.id_of(&ldr.root);
    let mut root = Frame::new((ldr.clone(), id), k.clone(), Acc::new(), Role::Base, ctx);
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        let top = stack.last_mut().unwrap_or(&mut root);
        let stepped = step(top, ctx, &mut walk);
        let stepped = match stepped {
            Ok(s) => s,
            // placed in the kustomization that failed; now at the entries that included it
            Err(e) if stack.is_empty() => return Err(e),
            Err(e) => return Err(includers_at(&root, &stack[..stack.len() - 1], e)),
        };
        match stepped {
            Step::Enter(child) => {
                // The root, the frames above it and the new one.
                meter.check_depth(stack.len() + 2)?;
                walk.enter(&child.ldr.root);
                stack.push(*child);
            }
            Step::Done => {
                let Some(done) = stack.pop() else {
                    return Ok(root.acc);
                };
                walk.leave(&done.ldr.root);
                let parent = stack.last_mut().unwrap_or(&mut root);
                if let Err(e) = walk.deliver(parent, done, ctx) {
                    return Err(includers_at(&root, &stack, e));
                }
            }
        }
    }
}

/// Places an error at the entry each includer was working on: `frames` from the outermost
/// (below the root) to the innermost, then the root.
fn includers_at(root: &Frame, frames: &[Frame], mut e: KustomizeError) -> KustomizeError {
    for f in frames.iter().rev() {
        e = include_at(f, e);
    }
    include_at(root, e)
}

/// The field and index of the `resources:`, `components:` or `transformers:` entry a
/// kustomization is working on.
fn current_entry(f: &Frame) -> Option<(&'static str, usize)> {
    match f.phase {
        Phase::Start => None,
        Phase::Resources(0) | Phase::Components(0) | Phase::Transformers(0) => None,
        Phase::Resources(j) if j - 1 < f.n_resources => Some(("resources", j - 1)),
        Phase::Resources(j) => Some(("bases", j - 1 - f.n_resources)),
        Phase::Components(j) => Some(("components", j - 1)),
        Phase::Transformers(j) => Some(("transformers", j - 1)),
    }
}

/// Places an error at the entry the kustomization is working on.
fn include_at(f: &Frame, e: KustomizeError) -> KustomizeError {
    match current_entry(f) {
        Some((field, i)) => f.k.at_entry(None, field, i, e),
        None => e,
    }
}

/// How a kustomization was included, which decides what its result becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A base (or the root): its objects, configuration and vars join the includer's.
    Base,
    /// A component: it works on the includer's accumulator, which it holds meanwhile.
    Component,
    /// A `transformers:` directory: its objects configure transformers of the includer.
    Transformers,
}

/// Where a kustomization's build stands: each phase walks one list of entries, and an entry
/// that includes another kustomization suspends the phase until that one is built.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Start,
    Resources(usize),
    Components(usize),
    Transformers(usize),
}

/// One kustomization being built.
struct Frame {
    ldr: Loader,
    /// The id of its directory in the walk.
    id: u32,
    k: Kustomization,
    acc: Acc,
    role: Role,
    phase: Phase,
    /// The entries of the current phase.
    entries: Vec<String>,
    /// How many of the `Resources` phase's entries are `resources:` (then `bases:`).
    n_resources: usize,
    /// Transformer configurations collected from `transformers:`.
    docs: Vec<Value>,
    /// For each of `docs`, the index of the `transformers:` entry it came from.
    doc_entries: Vec<usize>,
    /// The directories this kustomization's build included so far.
    included: Included,
    /// The schema generation when the build began.
    schema_gen: u64,
    /// Resource files of the `Resources` phase read and parsed ahead, by entry index.
    prefetched: Vec<Option<Result<Vec<Item>>>>,
}

impl Frame {
    fn new((ldr, id): (Loader, u32), k: Kustomization, acc: Acc, role: Role, ctx: &Ctx) -> Self {
        Frame {
            ldr,
            id,
            k,
            acc,
            role,
            phase: Phase::Start,
            entries: Vec::new(),
            n_resources: 0,
            docs: Vec::new(),
            doc_entries: Vec::new(),
            included: Included::default(),
            schema_gen: ctx.schema_gen(),
            prefetched: Vec::new(),
        }
    }
}

enum Step {
    /// Build this kustomization, then resume the current one.
    Enter(Box<Frame>),
    /// The kustomization is built.
    Done,
}

/// The directories a kustomization's build included: those it named itself, and what the
/// kustomizations it built or reused included (shared, so a result included along many paths
/// is recorded once).
#[derive(Default)]
struct Included {
    /// Numbers the nodes of the walk (set when the kustomization is built).
    serial: usize,
    dirs: Vec<u32>,
    parts: Vec<Arc<Included>>,
}

impl Drop for Included {
    /// Drops a long chain of parts without recursing.
    fn drop(&mut self) {
        let mut stack = std::mem::take(&mut self.parts);
        while let Some(part) = stack.pop() {
            if let Ok(mut owned) = Arc::try_unwrap(part) {
                stack.append(&mut owned.parts);
            }
        }
    }
}

/// A base's result, kept to be copied when the base is included again.
struct Memo {
    acc: Acc,
    file: PathBuf,
    is_component: bool,
    /// Every directory its build included.
    included: Arc<Included>,
    schema_gen: u64,
    /// The approximate size of its objects, which each copy counts against the budget.
    size: u64,
}

/// What the walk knows besides its frames.
#[derive(Default)]
struct Walk {
    /// Every directory that is or contains a kustomization being built, with how many of them
    /// it is for. Including one of these is a cycle.
    on_path: HashMap<PathBuf, usize>,
    /// Every directory included so far, numbered in order.
    ids: HashMap<PathBuf, u32>,
    /// `on_path` by id, for the directories that have one.
    on_path_ids: Vec<usize>,
    /// The serial of the next [`Included`] node, and per serial the last search that visited
    /// it.
    serials: usize,
    visited: Vec<u32>,
    search: u32,
    /// How often each directory was included as a base or a `transformers:` directory.
    requests: HashMap<u32, u32>,
    memo: HashMap<u32, Memo>,
}

fn cycle_error(includer: &Path, joined: &Path) -> KustomizeError {
    KustomizeError::Io {
        path: joined.to_path_buf(),
        message: format!(
            "cycle detected: '{}' refers to an ancestor",
            includer.display()
        ),
    }
}

fn remote_err(k: &Kustomization, field: &str, entry: &str) -> KustomizeError {
    KustomizeError::Unsupported {
        file: k.file.clone(),
        field: field.to_string(),
        entry: entry.to_string(),
        message: "remote resources (URLs, git repositories) are not supported".to_string(),
    }
}

fn component_as_base_err(file: &Path, dir: &Path) -> KustomizeError {
    KustomizeError::InvalidKustomization {
        file: file.to_path_buf(),
        message: format!("expected kind != 'Component' for path '{}'", dir.display()),
    }
}

impl Walk {
    fn enter(&mut self, dir: &Path) {
        for a in dir.ancestors() {
            *self.on_path.entry(a.to_path_buf()).or_default() += 1;
            if let Some(n) = self
                .ids
                .get(a)
                .and_then(|id| self.on_path_ids.get_mut(*id as usize))
            {
                *n += 1;
            }
        }
    }

    fn leave(&mut self, dir: &Path) {
        for a in dir.ancestors() {
            if let Some(n) = self.on_path.get_mut(a) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.on_path.remove(a);
                }
            }
            if let Some(n) = self
                .ids
                .get(a)
                .and_then(|id| self.on_path_ids.get_mut(*id as usize))
            {
                *n = n.saturating_sub(1);
            }
        }
    }

    fn id_of(&mut self, dir: &Path) -> u32 {
        if let Some(id) = self.ids.get(dir) {
            return *id;
        }
        let id = u32::try_from(self.ids.len()).unwrap_or(u32::MAX);
        self.ids.insert(dir.to_path_buf(), id);
        self.on_path_ids
            .push(self.on_path.get(dir).copied().unwrap_or(0));
        id
    }

    /// Freezes the directories a finished kustomization included into a shared node.
    fn freeze(&mut self, mut included: Included) -> Arc<Included> {
        included.serial = self.serials;
        self.serials += 1;
        self.visited.push(0);
        Arc::new(included)
    }

    /// A loader for the directory `entry` of the kustomization `f`, refusing a cycle; returns
    /// the directory's id.
    fn open(&mut self, f: &mut Frame, entry: &str) -> Result<(Loader, u32)> {
        let sub = f.ldr.sub(entry)?;
        if self.on_path.contains_key(&sub.root) {
            return Err(cycle_error(&f.ldr.root, &f.ldr.join(entry)));
        }
        let id = self.id_of(&sub.root);
        f.included.dirs.push(id);
        Ok((sub, id))
    }

    /// Whether a directory `inc` records is or contains a kustomization being built, so that
    /// including it now would be a cycle.
    fn would_cycle(&mut self, inc: &Arc<Included>, ldr: &Loader) -> Result<bool> {
        self.search = self.search.wrapping_add(1);
        if self.search == 0 {
            self.visited.iter_mut().for_each(|v| *v = 0);
            self.search = 1;
        }
        let mut stack = vec![Arc::clone(inc)];
        let mut steps = 0usize;
        while let Some(node) = stack.pop() {
            match self.visited.get_mut(node.serial) {
                Some(v) if *v == self.search => continue,
                Some(v) => *v = self.search,
                None => {}
            }
            steps += 1;
            if steps.is_multiple_of(4096) {
                ldr.meter().check_time()?;
            }
            let on_path = |d: &u32| self.on_path_ids.get(*d as usize).is_some_and(|n| *n > 0);
            if node.dirs.iter().any(on_path) {
                return Ok(true);
            }
            stack.extend(node.parts.iter().cloned());
        }
        Ok(false)
    }

    /// Counts an inclusion of a directory as a base or a `transformers:` directory.
    fn request(&mut self, id: u32) {
        *self.requests.entry(id).or_default() += 1;
    }

    /// The remembered result of a directory when it may be reused here: its accumulator,
    /// whether it is a component and its kustomization file. The copy's objects and their
    /// size count against the budget.
    fn reuse(&mut self, f: &mut Frame, id: u32, ctx: &Ctx) -> Result<Option<(Acc, bool, PathBuf)>> {
        let Some(m) = self.memo.get(&id) else {
            return Ok(None);
        };
        let (schema_gen, included) = (m.schema_gen, Arc::clone(&m.included));
        if schema_gen != ctx.schema_gen() || self.would_cycle(&included, &f.ldr)? {
            return Ok(None);
        }
        let Some(m) = self.memo.get(&id) else {
            return Ok(None);
        };
        f.ldr.meter().add_resources(m.acc.items.len())?;
        f.ldr.meter().add_bytes(m.size)?;
        f.included.parts.push(Arc::clone(&m.included));
        Ok(Some((m.acc.clone(), m.is_component, m.file.clone())))
    }

    /// Hands a built kustomization's result to its includer, remembering it when it was
    /// included more than once.
    fn deliver(&mut self, parent: &mut Frame, mut done: Frame, ctx: &Ctx) -> Result<()> {
        let included = self.freeze(std::mem::take(&mut done.included));
        parent.included.parts.push(Arc::clone(&included));
        if done.role == Role::Component {
            parent.acc = done.acc;
            return Ok(());
        }
        if self.requests.get(&done.id).is_some_and(|n| *n >= 2)
            && ctx.schema_gen() == done.schema_gen
            && !self.memo.contains_key(&done.id)
        {
            let size = done
                .acc
                .items
                .iter()
                .map(|i| approx_size(&i.res.obj))
                .fold(0u64, u64::saturating_add);
            let memo = Memo {
                acc: done.acc.clone(),
                file: done.k.file.clone(),
                is_component: done.k.is_component(),
                included,
                schema_gen: done.schema_gen,
                size,
            };
            self.memo.insert(done.id, memo);
        }
        match done.role {
            Role::Transformers => {
                push_docs(parent, done.acc.items.into_iter().map(|i| i.res.obj));
                Ok(())
            }
            _ => parent.acc.absorb(done.acc),
        }
    }
}

/// Advances a kustomization's build until it includes another kustomization or is done.
fn step(f: &mut Frame, ctx: &mut Ctx, walk: &mut Walk) -> Result<Step> {
    loop {
        f.ldr.meter().check_time()?;
        match f.phase {
            Phase::Start => {
                f.k.clear_cursor();
                load_openapi(&f.ldr, &f.k, ctx).map_err(|e| f.k.locate(&f.ldr, e))?;
                let mut entries = f.k.str_list("resources")?;
                f.n_resources = entries.len();
                entries.extend(f.k.str_list("bases")?);
                f.prefetched = prefetch_files(&f.ldr, &entries);
                f.entries = entries;
                f.phase = Phase::Resources(0);
            }
            Phase::Resources(i) => {
                let Some(entry) = f.entries.get(i).cloned() else {
                    f.k.clear_cursor();
                    configure_and_generate(&f.ldr, &f.k, &mut f.acc, ctx)
                        .map_err(|e| f.k.locate(&f.ldr, e))?;
                    f.entries = f.k.str_list("components")?;
                    f.phase = Phase::Components(0);
                    continue;
                };
                f.phase = Phase::Resources(i + 1);
                let ahead = f.prefetched.get_mut(i).and_then(Option::take);
                match resource_entry(f, &entry, ahead, ctx, walk) {
                    Ok(Some(child)) => return Ok(Step::Enter(child)),
                    Ok(None) => {}
                    Err(e) => return Err(include_at(f, e)),
                }
            }
            Phase::Components(i) => {
                let Some(entry) = f.entries.get(i).cloned() else {
                    f.k.clear_cursor();
                    run_builtin_transformers(&f.ldr, &f.k, &mut f.acc, ctx)
                        .map_err(|e| f.k.locate(&f.ldr, e))?;
                    f.entries = f.k.str_list("transformers")?;
                    f.phase = Phase::Transformers(0);
                    continue;
                };
                f.phase = Phase::Components(i + 1);
                return component_entry(f, &entry, ctx, walk)
                    .map(Step::Enter)
                    .map_err(|e| include_at(f, e));
            }
            Phase::Transformers(i) => {
                let Some(entry) = f.entries.get(i).cloned() else {
                    let root_name = f
                        .ldr
                        .root
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    // one entry's configurations at a time, to place an error at its entry
                    let docs = std::mem::take(&mut f.docs);
                    let owners = std::mem::take(&mut f.doc_entries);
                    f.k.clear_cursor();
                    for (doc, owner) in docs.iter().zip(owners) {
                        let one = std::slice::from_ref(doc);
                        run_transformer_docs(&f.ldr, &f.k, &root_name, &mut f.acc, ctx, one)
                            .map_err(|e| f.k.at_entry(None, "transformers", owner, e))?;
                    }
                    let vars = f.k.list("vars").map_err(|e| f.k.locate(&f.ldr, e))?;
                    f.acc.vars.extend(vars);
                    return Ok(Step::Done);
                };
                f.phase = Phase::Transformers(i + 1);
                match transformers_entry(f, &entry, ctx, walk) {
                    Ok(Some(child)) => return Ok(Step::Enter(child)),
                    Ok(None) => {}
                    Err(e) => return Err(include_at(f, e)),
                }
            }
        }
    }
}

/// Resource files parsed ahead of a kustomization's `resources:` loop start at this many
/// bytes in total: below it, starting threads costs more than it saves.
const PREFETCH_MIN_BYTES: u64 = 128 * 1024;

/// Reads and parses a kustomization's resource file entries on several threads (YAML parsing
/// is most of a large build's time), each result kept for its entry's turn: errors, budget
/// charges excepted, still surface in entry order. Entries that are not plain local files are
/// left to the loop.
fn prefetch_files(ldr: &Loader, entries: &[String]) -> Vec<Option<Result<Vec<Item>>>> {
    let threads = crate::par::threads();
    // (entry index, file size) of the entries that are local files, from one `stat` each: a
    // directory is a base, and a missing file is reported by the loop with its own message.
    let mut files: Vec<(usize, u64)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| !is_remote(e))
        .filter_map(|(i, e)| {
            let meta = std::fs::metadata(ldr.join(e)).ok()?;
            (!meta.is_dir()).then_some((i, meta.len()))
        })
        .collect();
    let bytes: u64 = files.iter().map(|f| f.1).sum();
    let mut out: Vec<Option<Result<Vec<Item>>>> = std::iter::repeat_with(|| None)
        .take(entries.len())
        .collect();
    if threads < 2 || files.len() < 2 || bytes < PREFETCH_MIN_BYTES {
        return out;
    }
    // Largest first, so that a big file does not start last while the other threads idle.
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    let parsed = crate::par::map_ordered(&files, threads, |&(i, _)| load_items(ldr, &entries[i]));
    for ((i, _), r) in files.into_iter().zip(parsed) {
        out[i] = Some(r);
    }
    out
}

/// One `resources:` (or `bases:`) entry: a file is read now (or was, by [`prefetch_files`]),
/// a directory is a base to build.
fn resource_entry(
    f: &mut Frame,
    entry: &str,
    ahead: Option<Result<Vec<Item>>>,
    ctx: &Ctx,
    walk: &mut Walk,
) -> Result<Option<Box<Frame>>> {
    if is_remote(entry) {
        return Err(remote_err(&f.k, "resources", entry));
    }
    if f.ldr.is_dir(entry) {
        let (sub, id) = walk.open(f, entry)?;
        walk.request(id);
        if let Some((acc, is_component, file)) = walk.reuse(f, id, ctx)? {
            if is_component {
                return Err(component_as_base_err(&file, &sub.root));
            }
            f.acc.absorb(acc)?;
            return Ok(None);
        }
        let sk = load_kustomization(&sub)?;
        if sk.is_component() {
            return Err(component_as_base_err(&sk.file, &sub.root));
        }
        let frame = Frame::new((sub, id), sk, Acc::new(), Role::Base, ctx);
        return Ok(Some(Box::new(frame)));
    }
    let joined = f.ldr.join(entry);
    if !joined.exists() {
        return Err(KustomizeError::Resource {
            file: f.k.file.clone(),
            entry: entry.to_string(),
            message: format!("file or directory '{}' does not exist", joined.display()),
        });
    }
    let origin = format!("path: {}\n", relative_to(&ctx.root, &joined));
    let mut items = match ahead {
        Some(r) => r?,
        None => load_items(&f.ldr, entry)?,
    };
    for item in items.iter_mut() {
        item.origin = Some(origin.clone());
    }
    f.acc.append_all(items)?;
    Ok(None)
}

/// One `components:` entry: the component works on this kustomization's accumulator.
fn component_entry(f: &mut Frame, entry: &str, ctx: &Ctx, walk: &mut Walk) -> Result<Box<Frame>> {
    if is_remote(entry) {
        return Err(remote_err(&f.k, "components", entry));
    }
    let (sub, id) = walk.open(f, entry)?;
    let sk = load_kustomization(&sub)?;
    if !sk.is_component() {
        return Err(KustomizeError::InvalidKustomization {
            file: sk.file.clone(),
            message: format!(
                "expected kind 'Component' for path '{}'",
                sub.root.display()
            ),
        });
    }
    let acc = std::mem::replace(&mut f.acc, Acc::new());
    Ok(Box::new(Frame::new(
        (sub, id),
        sk,
        acc,
        Role::Component,
        ctx,
    )))
}

/// One `transformers:` entry: inline YAML, a file, or a directory whose built objects are the
/// transformer configurations.
fn transformers_entry(
    f: &mut Frame,
    entry: &str,
    ctx: &Ctx,
    walk: &mut Walk,
) -> Result<Option<Box<Frame>>> {
    if entry.contains('\n') {
        let docs = parse_stream(
            entry,
            &format!("{} (transformers, inline)", f.k.file.display()),
        )?;
        push_docs(f, docs);
        return Ok(None);
    }
    if f.ldr.is_dir(entry) {
        let (sub, id) = walk.open(f, entry)?;
        walk.request(id);
        if let Some((acc, _, _)) = walk.reuse(f, id, ctx)? {
            push_docs(f, acc.items.into_iter().map(|i| i.res.obj));
            return Ok(None);
        }
        let sk = load_kustomization(&sub)?;
        let frame = Frame::new((sub, id), sk, Acc::new(), Role::Transformers, ctx);
        return Ok(Some(Box::new(frame)));
    }
    let docs = load_objects(&f.ldr, entry)?;
    push_docs(f, docs);
    Ok(None)
}

/// Adds transformer configurations that come from the `transformers:` entry being worked on.
fn push_docs(f: &mut Frame, docs: impl IntoIterator<Item = Value>) {
    let owner = current_entry(f).map_or(0, |(_, i)| i);
    for d in docs {
        f.docs.push(d);
        f.doc_entries.push(owner);
    }
}
