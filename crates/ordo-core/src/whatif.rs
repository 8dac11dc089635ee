//! What-if capacities for scheduling passes: scratch copies of the scheduler's capacity that a
//! pass changes and rolls back, so that a pass does not copy the whole cluster.

use crate::pools::Pools;
use std::ops::{Deref, DerefMut};
use std::sync::{Mutex, MutexGuard};

/// Scratch copies of a scheduler's count-only capacity, equal to it between passes: every
/// commit is applied to them as well ([`Scratch::apply`]). A pass borrows one
/// ([`Scratch::what_if`]), changes it at will, and the borrow rolls every change back when it
/// ends, so a pass costs what it changes, not the cluster's size. Two slots, since a pass needs
/// at most two node-level what-if states at once (EASY's plan and, under consolidated placement,
/// its shadow). A slot that is busy (another thread in a pass on the same scheduler) or a
/// detailed capacity (shares, CPUs, memory) gives a fresh clone instead: slower, same result.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    slots: [Mutex<Option<Pools>>; 2],
    /// A pooled counter for EASY's shadow on a count-only pool ([`Scratch::counter`]), kept
    /// between passes so that a pass does not allocate one. Commits are not applied to it.
    counter: Mutex<Option<Pools>>,
}

impl Clone for Scratch {
    /// A clone starts with no copies; they are made again on first use.
    fn clone(&self) -> Self {
        Scratch::default()
    }
}

impl Scratch {
    /// Applies a commit (the same change as to the scheduler's capacity) to every copy.
    pub(crate) fn apply(&mut self, change: impl Fn(&mut Pools)) {
        for slot in &mut self.slots {
            match slot.get_mut() {
                Ok(Some(c)) => change(c),
                Ok(None) => {}
                // A pass panicked while holding it: it may not be rolled back, drop it.
                Err(_) => *slot = Mutex::new(None),
            }
        }
    }

    /// Forgets every copy (the scheduler's capacity was replaced).
    pub(crate) fn reset(&mut self) {
        *self = Scratch::default();
    }

    /// A what-if state equal to `base`, the capacity the copies mirror.
    pub(crate) fn what_if<'a>(&'a self, base: &Pools) -> WhatIf<'a> {
        if !base.is_detailed() {
            for slot in &self.slots {
                if let Ok(mut g) = slot.try_lock() {
                    let c = g.get_or_insert_with(|| base.clone());
                    c.begin_undo();
                    return WhatIf::Scratch(g);
                }
            }
        }
        WhatIf::Owned(base.clone())
    }

    /// A pooled counter of `total` GPUs with `free` free (see [`Pools::counter`]), reused
    /// from pass to pass when its slot is not busy.
    pub(crate) fn counter(&self, total: u64, free: u64) -> WhatIf<'_> {
        if let Ok(mut g) = self.counter.try_lock() {
            let c = g.get_or_insert_with(|| Pools::counter(total, free));
            if c.total() != total {
                *c = Pools::counter(total, free);
            }
            let f = c.total_free();
            if f < free {
                c.give_count((free - f) as u32);
            } else if f > free {
                c.take_count((f - free) as u32);
            }
            // Not logging: the drop's rollback has nothing to undo; the next use sets the count.
            return WhatIf::Scratch(g);
        }
        WhatIf::Owned(Pools::counter(total, free))
    }

    /// Checks that every copy equals `base` (for `sanity_check`).
    pub(crate) fn check(&self, base: &Pools) -> Result<(), String> {
        for (i, slot) in self.slots.iter().enumerate() {
            if let Ok(g) = slot.try_lock() {
                if g.as_ref().is_some_and(|c| c != base) {
                    return Err(format!("scratch capacity {i} differs from the scheduler's capacity"));
                }
            }
        }
        Ok(())
    }
}

/// A capacity a pass may change: a borrowed scratch copy (rolled back on drop) or its own.
#[derive(Debug)]
pub(crate) enum WhatIf<'a> {
    /// A scratch copy, rolled back when this ends.
    Scratch(MutexGuard<'a, Option<Pools>>),
    /// A capacity of its own (a clone, or a pooled counter).
    Owned(Pools),
}

impl Deref for WhatIf<'_> {
    type Target = Pools;
    fn deref(&self) -> &Pools {
        match self {
            WhatIf::Scratch(g) => g.as_ref().expect("a scratch slot in use holds a copy"),
            WhatIf::Owned(c) => c,
        }
    }
}

impl DerefMut for WhatIf<'_> {
    fn deref_mut(&mut self) -> &mut Pools {
        match self {
            WhatIf::Scratch(g) => g.as_mut().expect("a scratch slot in use holds a copy"),
            WhatIf::Owned(c) => c,
        }
    }
}

impl Drop for WhatIf<'_> {
    fn drop(&mut self) {
        if let WhatIf::Scratch(g) = self {
            if let Some(c) = g.as_mut() {
                c.rollback();
            }
        }
    }
}
