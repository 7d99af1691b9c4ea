//! `ModuleCore`: what every module registers (parameters, buffers, children) and the
//! training flag, behind one `Arc` so that clones of a module share all of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use strata_core::{scope, Category, Error, Result, Tensor};

use super::Module;

/// A registered parameter or buffer: the module's registry and the layer that computes with
/// it hold the same slot, so replacing its tensor (loading with `assign`, pruning's
/// reparametrisation) is seen by both.
#[derive(Debug, Clone)]
pub struct TensorSlot(Arc<RwLock<Tensor>>);

impl TensorSlot {
    /// A slot holding `t`, for a parameter or buffer field of a `#[derive(Module)]` struct
    /// (the derive registers it under the field's name).
    pub fn new(t: Tensor) -> Self {
        TensorSlot(Arc::new(RwLock::new(t)))
    }

    /// The tensor held now (a handle: the same tensor, not a copy).
    pub fn get(&self) -> Tensor {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// True when both are handles to one slot: a parameter registered under two names, as
    /// a language model's output head tied to its token embedding.
    pub fn is_same(&self, other: &TensorSlot) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Puts another tensor in the slot; the module and its layer both see it from now on.
    pub(crate) fn set(&self, t: Tensor) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = t;
    }
}

/// A hook run before every forward of its module, inside the module's scope (pruning's
/// reparametrised form recomputes `weight` from `weight_orig` and `weight_mask` with one).
pub type PreForwardHook = Arc<dyn Fn(&ModuleCore) -> Result<()> + Send + Sync>;

#[derive(Default)]
struct Entries {
    params: Vec<(String, TensorSlot)>,
    buffers: Vec<(String, TensorSlot, bool)>,
    children: Vec<(String, Arc<dyn Module>)>,
    plain: Vec<(String, TensorSlot)>,
    pre_hooks: Vec<(u64, Option<String>, PreForwardHook)>,
    next_hook: u64,
}

struct Inner {
    kind: &'static str,
    /// A built-in layer or container: the ops it runs are attributed to its caller's line.
    library: bool,
    name: RwLock<Arc<str>>,
    training: AtomicBool,
    entries: RwLock<Entries>,
    /// Set once a derived module has registered its fields: `Ok`, or why it could not.
    fields: OnceLock<Result<()>>,
}

/// The registry behind every module: its parameters, buffers and children in registration
/// order (PyTorch's `_parameters`, `_buffers`, `_modules`), the name its parent registered it
/// under, and the training flag. Cloning it clones a handle: every clone sees the same
/// registry and flag.
#[derive(Clone)]
pub struct ModuleCore(Arc<Inner>);

impl std::fmt::Debug for ModuleCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.entries();
        f.debug_struct(self.0.kind)
            .field(
                "parameters",
                &e.params.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field(
                "buffers",
                &e.buffers.iter().map(|(n, ..)| n).collect::<Vec<_>>(),
            )
            .field(
                "children",
                &e.children.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

const OP: &str = "Module::register";

impl ModuleCore {
    /// An empty registry for a module of type `kind` (`"Linear"`), in training mode.
    pub fn new(kind: &'static str) -> Self {
        Self::with_library(kind, false)
    }

    /// The registry of a built-in layer or container of this crate: what its forward
    /// allocates is attributed to the program's line that called it (see
    /// [`called_at`](ModuleCore::called_at)), not to this crate's sources.
    pub(crate) fn library(kind: &'static str) -> Self {
        Self::with_library(kind, true)
    }

    fn with_library(kind: &'static str, library: bool) -> Self {
        ModuleCore(Arc::new(Inner {
            kind,
            library,
            name: RwLock::new(Arc::from("")),
            training: AtomicBool::new(true),
            entries: RwLock::new(Entries::default()),
            fields: OnceLock::new(),
        }))
    }

    fn entries(&self) -> RwLockReadGuard<'_, Entries> {
        self.0.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn entries_mut(&self) -> RwLockWriteGuard<'_, Entries> {
        self.0.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The module's type name (`"Linear"`).
    pub fn kind(&self) -> &'static str {
        self.0.kind
    }

    /// The name its parent registered it under (`"3"` in a `Sequential`), empty for a root.
    pub fn name(&self) -> Arc<str> {
        self.0
            .name
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_name(&self, name: &str) {
        *self.0.name.write().unwrap_or_else(|p| p.into_inner()) = Arc::from(name);
    }

    /// True when both are handles to one registry (clones of one module).
    pub fn is_same(&self, other: &ModuleCore) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn check_name(&self, e: &Entries, name: &str) -> Result<()> {
        if name.is_empty() || name.contains('.') {
            return Err(Error::argument(
                OP,
                format!("{name:?} cannot name a parameter, buffer or child: names are non-empty and have no '.'"),
                None,
            ));
        }
        let taken = e.params.iter().any(|(n, _)| n == name)
            || e.buffers.iter().any(|(n, ..)| n == name)
            || e.children.iter().any(|(n, _)| n == name)
            || e.plain.iter().any(|(n, _)| n == name);
        if taken {
            return Err(Error::argument(
                OP,
                format!("{} already has an attribute named {name:?}", self.0.kind),
                Some("choose another name"),
            ));
        }
        Ok(())
    }

    /// Registers `t` as the parameter `name`: it becomes a leaf that requires grad (floating
    /// dtypes) and its memory is counted as [`Category::Parameter`].
    pub fn register_parameter(&self, name: &str, t: Tensor) -> Result<TensorSlot> {
        let slot = TensorSlot::new(t);
        self.register_parameter_slot(name, &slot)?;
        Ok(slot)
    }

    /// Registers the parameter in `slot` as `name`, keeping the slot (a field of a derived
    /// module holds the same one, so an `assign` load or a reparametrisation is seen there).
    pub fn register_parameter_slot(&self, name: &str, slot: &TensorSlot) -> Result<()> {
        let t = as_parameter(slot.get())?;
        let mut e = self.entries_mut();
        self.check_name(&e, name)?;
        slot.set(t);
        e.params.push((name.to_owned(), slot.clone()));
        Ok(())
    }

    /// Registers the buffer in `slot` as `name`, keeping the slot (see
    /// [`register_buffer`](ModuleCore::register_buffer)).
    pub fn register_buffer_slot(
        &self,
        name: &str,
        slot: &TensorSlot,
        persistent: bool,
    ) -> Result<()> {
        slot.get().mark_category(Category::Other);
        let mut e = self.entries_mut();
        self.check_name(&e, name)?;
        e.buffers.push((name.to_owned(), slot.clone(), persistent));
        Ok(())
    }

    /// Runs `register` on this registry the first time it is called for it (any clone),
    /// and keeps its outcome: how `#[derive(Module)]` registers a struct's fields on first
    /// use, so no field can be forgotten. An error is returned by every later
    /// [`scoped`](ModuleCore::scoped) call (each forward), naming the module.
    pub fn register_fields_once(&self, register: impl FnOnce(&ModuleCore) -> Result<()>) {
        self.0.fields.get_or_init(|| register(self));
    }

    /// Registers `t` as the buffer `name` (state that is not trained: running statistics,
    /// masks). Its memory is counted as [`Category::Other`]. A `persistent` buffer is part of
    /// the state dict.
    pub fn register_buffer(&self, name: &str, t: Tensor, persistent: bool) -> Result<TensorSlot> {
        let slot = TensorSlot::new(t);
        self.register_buffer_slot(name, &slot, persistent)?;
        Ok(slot)
    }

    /// Registers `child` (a handle clone of it) under `name`; its parameters and buffers
    /// appear under `name.` and its scope is `name` inside this module's.
    pub fn register_module<M: Module + Clone>(&self, name: &str, child: &M) -> Result<()> {
        self.register_dyn(name, Arc::new(child.clone()))
    }

    /// [`register_module`](ModuleCore::register_module) for a module already behind an `Arc`.
    pub fn register_dyn(&self, name: &str, child: Arc<dyn Module>) -> Result<()> {
        let contains_self = child.core().is_same(self)
            || child
                .core()
                .named_descendants()
                .iter()
                .any(|(_, m)| m.core().is_same(self));
        if contains_self {
            return Err(Error::argument(
                OP,
                format!("{name:?} is or contains this module: a module cannot contain itself"),
                None,
            ));
        }
        let mut e = self.entries_mut();
        self.check_name(&e, name)?;
        child.core().set_name(name);
        e.children.push((name.to_owned(), child));
        Ok(())
    }

    /// The slot of this module's own parameter `name`.
    pub fn parameter_slot(&self, name: &str) -> Option<TensorSlot> {
        let e = self.entries();
        e.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }

    /// The slot of this module's own buffer `name`.
    pub fn buffer_slot(&self, name: &str) -> Option<TensorSlot> {
        let e = self.entries();
        e.buffers
            .iter()
            .find(|(n, ..)| n == name)
            .map(|(_, s, _)| s.clone())
    }

    /// The slot of `name` when it is a plain attribute: a tensor the module computes with
    /// that is neither a parameter nor a buffer (pruning's reparametrised `weight`).
    pub fn plain_slot(&self, name: &str) -> Option<TensorSlot> {
        let e = self.entries();
        e.plain
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }

    /// Removes this module's parameter `name` from the registry and returns its slot, which
    /// stays a plain attribute (listed by [`plain_slot`](ModuleCore::plain_slot)) so the
    /// layer still computes with it.
    pub(crate) fn demote_parameter(&self, name: &str) -> Option<TensorSlot> {
        let mut e = self.entries_mut();
        let i = e.params.iter().position(|(n, _)| n == name)?;
        let (n, slot) = e.params.remove(i);
        e.plain.push((n, slot.clone()));
        Some(slot)
    }

    /// Makes the plain attribute `name` a parameter again, holding `t` (pruning's `remove`).
    pub(crate) fn promote_plain(&self, name: &str, t: Tensor) -> Result<TensorSlot> {
        let t = as_parameter(t)?;
        let mut e = self.entries_mut();
        let i = e.plain.iter().position(|(n, _)| n == name).ok_or_else(|| {
            Error::argument(
                OP,
                format!("{} has no plain attribute {name:?}", self.0.kind),
                None,
            )
        })?;
        let (n, slot) = e.plain.remove(i);
        slot.set(t);
        e.params.push((n, slot.clone()));
        Ok(slot)
    }

    /// Removes this module's parameter or buffer `name` (pruning's `remove` drops
    /// `weight_orig` and `weight_mask`).
    pub(crate) fn unregister(&self, name: &str) -> bool {
        let mut e = self.entries_mut();
        let before = e.params.len() + e.buffers.len();
        e.params.retain(|(n, _)| n != name);
        e.buffers.retain(|(n, ..)| n != name);
        before != e.params.len() + e.buffers.len()
    }

    /// Adds a hook run before every forward; the returned id removes it.
    pub fn add_pre_forward_hook(&self, hook: PreForwardHook) -> u64 {
        self.add_labelled_hook(None, hook)
    }

    /// Adds a hook that [`remove_labelled_hook`](ModuleCore::remove_labelled_hook) finds by
    /// `label` (pruning labels its hook with the parameter's name).
    pub(crate) fn add_labelled_hook(&self, label: Option<String>, hook: PreForwardHook) -> u64 {
        let mut e = self.entries_mut();
        let id = e.next_hook;
        e.next_hook += 1;
        e.pre_hooks.push((id, label, hook));
        id
    }

    /// Removes the hook `id`; false when there was none.
    pub fn remove_pre_forward_hook(&self, id: u64) -> bool {
        let mut e = self.entries_mut();
        let before = e.pre_hooks.len();
        e.pre_hooks.retain(|(i, ..)| *i != id);
        before != e.pre_hooks.len()
    }

    /// Removes the hooks labelled `label`.
    pub(crate) fn remove_labelled_hook(&self, label: &str) {
        self.entries_mut()
            .pre_hooks
            .retain(|(_, l, _)| l.as_deref() != Some(label));
    }

    /// [`scoped`](ModuleCore::scoped) for a call made at `location` (what
    /// [`Module::call`] passes): a built-in module's ops are attributed to `location`
    /// unless an outer call or op already names the program's line.
    pub fn called_at<R>(
        &self,
        location: &'static std::panic::Location<'static>,
        f: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let _site = self
            .0
            .library
            .then(|| strata_core::CallSite::enter(location, self.0.kind));
        self.scoped(f)
    }

    /// Runs `f` as this module's forward: inside the module's scope (its registered name,
    /// appended to the caller's scope, so a child's memory is reported under its dotted path
    /// such as `features.3`), after the pre-forward hooks.
    pub fn scoped<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        if let Some(Err(e)) = self.0.fields.get() {
            return Err(Error::argument(
                OP,
                format!("the fields of {} could not be registered: {e}", self.0.kind),
                Some("a derived module's field names must not be registered again by hand"),
            ));
        }
        let name = self.name();
        let _scope = scope::enter(&name);
        let hooks: Vec<PreForwardHook> = self
            .entries()
            .pre_hooks
            .iter()
            .map(|(.., h)| h.clone())
            .collect();
        for h in hooks {
            h(self)?;
        }
        f()
    }

    /// This module's own parameters (not its children's), in registration order.
    pub fn own_parameters(&self) -> Vec<(String, Tensor)> {
        self.entries()
            .params
            .iter()
            .map(|(n, s)| (n.clone(), s.get()))
            .collect()
    }

    /// This module's own buffers with their persistence, in registration order.
    pub fn own_buffers(&self) -> Vec<(String, Tensor, bool)> {
        self.entries()
            .buffers
            .iter()
            .map(|(n, s, p)| (n.clone(), s.get(), *p))
            .collect()
    }

    /// Every slot this module holds itself: parameters, buffers and plain attributes.
    pub(crate) fn own_slots(&self) -> Vec<TensorSlot> {
        let e = self.entries();
        e.params
            .iter()
            .map(|(_, s)| s.clone())
            .chain(e.buffers.iter().map(|(_, s, _)| s.clone()))
            .chain(e.plain.iter().map(|(_, s)| s.clone()))
            .collect()
    }

    /// The direct children with their names, in registration order.
    pub fn children(&self) -> Vec<(String, Arc<dyn Module>)> {
        self.entries().children.clone()
    }

    /// Every module below this one (not itself) with its dotted path, parents before their
    /// children, each module once.
    pub fn named_descendants(&self) -> Vec<(String, Arc<dyn Module>)> {
        let mut out: Vec<(String, Arc<dyn Module>)> = Vec::new();
        let mut stack: Vec<(String, Arc<dyn Module>)> = self.children().into_iter().rev().collect();
        while let Some((path, m)) = stack.pop() {
            if out.iter().any(|(_, seen)| seen.core().is_same(m.core())) {
                continue;
            }
            for (n, c) in m.core().children().into_iter().rev() {
                stack.push((format!("{path}.{n}"), c));
            }
            out.push((path, m));
        }
        out
    }

    /// Every parameter of this module and its descendants under its dotted name
    /// (`0.weight`, `features.3.bias`), in PyTorch's order, each tensor once.
    pub fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut out: Vec<(String, Tensor)> = Vec::new();
        self.visit(&mut |prefix, core| {
            for (n, t) in core.own_parameters() {
                if !out.iter().any(|(_, seen)| seen.is_same(&t)) {
                    out.push((join(prefix, &n), t));
                }
            }
        });
        out
    }

    /// Every buffer of this module and its descendants under its dotted name, with its
    /// persistence, each tensor once.
    pub fn named_buffers(&self) -> Vec<(String, Tensor, bool)> {
        let mut out: Vec<(String, Tensor, bool)> = Vec::new();
        self.visit(&mut |prefix, core| {
            for (n, t, p) in core.own_buffers() {
                if !out.iter().any(|(_, seen, _)| seen.is_same(&t)) {
                    out.push((join(prefix, &n), t, p));
                }
            }
        });
        out
    }

    /// Calls `f` with each module's dotted prefix and registry: this one (prefix `""`) first,
    /// then its descendants.
    pub(crate) fn visit(&self, f: &mut dyn FnMut(&str, &ModuleCore)) {
        f("", self);
        for (path, m) in self.named_descendants() {
            f(&path, m.core());
        }
    }

    /// Sets training mode (`true`) or evaluation mode on this module and every descendant.
    pub fn set_training(&self, training: bool) {
        self.visit(&mut |_, c| c.0.training.store(training, Ordering::Release));
    }

    /// Whether the module is in training mode.
    pub fn is_training(&self) -> bool {
        self.0.training.load(Ordering::Acquire)
    }
}

/// `prefix.name`, or `name` at the root.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// `t` as a parameter: a leaf that requires grad when floating, counted as a parameter.
fn as_parameter(t: Tensor) -> Result<Tensor> {
    if !t.is_leaf() {
        return Err(Error::argument(
            OP,
            "a parameter must be a leaf tensor (not the result of a recorded op)",
            Some("register `t.detach()?`"),
        ));
    }
    t.mark_category(Category::Parameter);
    if t.dtype().is_floating() && !t.requires_grad() {
        t.requires_grad_(true)?;
    }
    Ok(t)
}
