//! The switch of a zone between roots, as a pure state machine.
//!
//! A zone's zonepaths stand in four slots: `Current` (`<base>/<zone>`, what runs), `Previous`
//! (`<base>/.previous/<zone>`, the root kept for a rollback), `Aside` (`<base>/.aside/<zone>`,
//! where the current one waits while the previous one takes its place) and `Staging` (a new
//! root). Each zonepath carries a generation (a unique name written when it was filled), and
//! every move is one rename, so a slot holds a whole zonepath or nothing.
//!
//! An update writes a journal naming the generation the zone must end at if the switch does
//! not complete (the one running), then discards the previous root, moves the current one to
//! `Previous` and the new one to `Current`. Once the new zone is ready the journal is removed
//! (confirmed). Until then, after a crash, a timeout or `rdctl worker rollback` (which journals
//! the previous generation as its target), [`next_move`] is asked again and again from what is
//! observed until the target runs: each answer is one rename, so a crash between two answers
//! is followed by the same reasoning from wherever it stopped, and the zone runs either the
//! old root or the new one, never neither, once a start has settled it. The other zonepath is
//! kept as the previous root (kubelet's ReplicaSet kept for `rollout undo`).

/// Where a zonepath can stand during a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Slot {
    /// `<base>/<zone>`: the zone that runs.
    Current,
    /// `<base>/.previous/<zone>`: the root kept for a rollback.
    Previous,
    /// `<base>/.aside/<zone>`: the current root while the previous one takes its place.
    Aside,
    /// The new root, filled in `<base>/.staging`.
    Staging,
}

/// One step of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// One rename from a slot to an empty one.
    Rename(Slot, Slot),
    /// The zonepath in the slot goes to the trash (one rename) and is removed.
    Discard(Slot),
}

/// The generation in each slot, as observed (`None`: the slot is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slots {
    /// `Current`.
    pub current: Option<String>,
    /// `Previous`.
    pub previous: Option<String>,
    /// `Aside`.
    pub aside: Option<String>,
    /// `Staging`.
    pub staging: Option<String>,
}

impl Slots {
    /// The generation in `slot`.
    pub fn get(&self, slot: Slot) -> Option<&String> {
        match slot {
            Slot::Current => self.current.as_ref(),
            Slot::Previous => self.previous.as_ref(),
            Slot::Aside => self.aside.as_ref(),
            Slot::Staging => self.staging.as_ref(),
        }
    }

    fn get_mut(&mut self, slot: Slot) -> &mut Option<String> {
        match slot {
            Slot::Current => &mut self.current,
            Slot::Previous => &mut self.previous,
            Slot::Aside => &mut self.aside,
            Slot::Staging => &mut self.staging,
        }
    }

    /// The slot holding generation `g`.
    pub fn find(&self, g: &str) -> Option<Slot> {
        [Slot::Current, Slot::Previous, Slot::Aside, Slot::Staging]
            .into_iter()
            .find(|s| self.get(*s).is_some_and(|x| x == g))
    }

    /// What the slots hold after `m` (the model the file system follows).
    pub fn apply(&mut self, m: Move) {
        match m {
            Move::Rename(from, to) => {
                let g = self.get_mut(from).take();
                debug_assert!(self.get(to).is_none(), "{m:?} onto a full slot");
                *self.get_mut(to) = g;
            }
            Move::Discard(s) => *self.get_mut(s) = None,
        }
    }
}

/// The moves of an update, in order, from slots where the current zone runs and the new root
/// is staged: the older previous root goes, the current root becomes the previous one, the
/// new one the current. Written after the journal naming the current generation.
pub fn update_moves(slots: &Slots) -> Vec<Move> {
    let mut v = Vec::new();
    if slots.previous.is_some() {
        v.push(Move::Discard(Slot::Previous));
    }
    if slots.current.is_some() {
        v.push(Move::Rename(Slot::Current, Slot::Previous));
    }
    v.push(Move::Rename(Slot::Staging, Slot::Current));
    v
}

/// The next move bringing generation `target` to `Current` (keeping the zonepath it replaces
/// as the previous root), or `None` when it runs and nothing is left aside or staged. A target
/// found nowhere (removed by hand) settles on what runs, else on the previous root.
pub fn next_move(target: &str, s: &Slots) -> Option<Move> {
    let found = s.find(target).or_else(|| {
        [Slot::Current, Slot::Previous, Slot::Aside]
            .into_iter()
            .find(|x| s.get(*x).is_some())
    });
    let Some(at) = found else {
        // Nothing whole to run: a staged root the switch never placed goes.
        return s.staging.is_some().then_some(Move::Discard(Slot::Staging));
    };
    if at == Slot::Current {
        if s.aside.is_some() {
            return Some(if s.previous.is_none() {
                Move::Rename(Slot::Aside, Slot::Previous)
            } else {
                Move::Discard(Slot::Aside)
            });
        }
        return s.staging.is_some().then_some(Move::Discard(Slot::Staging));
    }
    if s.current.is_some() {
        // The zonepath that runs makes room: aside while the target comes in, so it can
        // become the previous root.
        return Some(if s.aside.is_none() {
            Move::Rename(Slot::Current, Slot::Aside)
        } else if s.previous.is_none() {
            Move::Rename(Slot::Current, Slot::Previous)
        } else if at == Slot::Aside {
            Move::Discard(Slot::Previous)
        } else {
            Move::Discard(Slot::Aside)
        });
    }
    Some(Move::Rename(at, Slot::Current))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(target: &str, mut s: Slots) -> (Slots, Vec<Move>) {
        let mut done = Vec::new();
        while let Some(m) = next_move(target, &s) {
            s.apply(m);
            done.push(m);
            assert!(done.len() <= 6, "no end: {done:?}");
        }
        (s, done)
    }

    fn slots(c: Option<&str>, p: Option<&str>, a: Option<&str>, st: Option<&str>) -> Slots {
        let o = |x: Option<&str>| x.map(str::to_owned);
        Slots {
            current: o(c),
            previous: o(p),
            aside: o(a),
            staging: o(st),
        }
    }

    /// An update cut short after any of its moves (or in the middle of settling it back)
    /// settles on the old root with the new one kept as the previous root once it was
    /// placed; confirmed, the new root runs with the old one as previous.
    #[test]
    fn an_update_cut_at_any_move_settles_on_the_old_root() {
        for older in [None, Some("older")] {
            let start = slots(Some("old"), older, None, Some("new"));
            let moves = update_moves(&start);
            assert_eq!(moves.len(), if older.is_some() { 3 } else { 2 });
            for k in 0..=moves.len() {
                let mut s = start.clone();
                for m in &moves[..k] {
                    s.apply(*m);
                    // Never neither: the old root is somewhere at every moment.
                    assert!(s.find("old").is_some(), "{s:?}");
                }
                let (end, done) = settle("old", s.clone());
                assert_eq!(
                    end.current.as_deref(),
                    Some("old"),
                    "cut after {k}: {done:?}"
                );
                assert_eq!(end.aside, None);
                assert_eq!(end.staging, None);
                if k == moves.len() {
                    // Placed: undoing it is the rollback, which keeps the new root.
                    assert_eq!(end.previous.as_deref(), Some("new"), "{done:?}");
                    // And each point of that rollback settles the same way again.
                    for j in 0..done.len() {
                        let mut again = s.clone();
                        for m in &done[..j] {
                            again.apply(*m);
                            assert!(again.find("old").is_some());
                        }
                        assert_eq!(settle("old", again).0, end, "rollback cut after {j}");
                    }
                }
            }
            // Confirmed: no journal, nothing to settle; the new root runs.
            let mut s = start.clone();
            for m in moves {
                s.apply(m);
            }
            assert_eq!(s, slots(Some("new"), Some("old"), None, None));
        }
    }

    /// A rollback (journal: the previous generation) swaps the two roots in three renames;
    /// cut after any of them it settles the same; a second rollback swaps them back.
    #[test]
    fn a_rollback_swaps_current_and_previous_and_is_resumable() {
        let start = slots(Some("b"), Some("a"), None, None);
        let (end, done) = settle("a", start.clone());
        assert_eq!(end, slots(Some("a"), Some("b"), None, None));
        assert_eq!(
            done,
            [
                Move::Rename(Slot::Current, Slot::Aside),
                Move::Rename(Slot::Previous, Slot::Current),
                Move::Rename(Slot::Aside, Slot::Previous),
            ]
        );
        for k in 0..done.len() {
            let mut s = start.clone();
            for m in &done[..k] {
                s.apply(*m);
            }
            assert_eq!(settle("a", s).0, end, "cut after {k}");
        }
        assert_eq!(settle("b", end).0, start);
    }

    /// From every arrangement of up to four generations in the slots (each once), settling
    /// ends within six moves with the target running (or, target gone, the first of current,
    /// previous, aside), nothing aside or staged, and a previous root kept whenever another
    /// whole zonepath (current, previous or aside) was there to keep.
    #[test]
    fn every_arrangement_settles_on_the_target_and_keeps_a_previous_root() {
        let gens = ["t", "x", "y", "z"];
        let choices: Vec<Option<&str>> = std::iter::once(None)
            .chain(gens.iter().copied().map(Some))
            .collect();
        let mut seen = 0;
        for c in &choices {
            for p in &choices {
                for a in &choices {
                    for st in &choices {
                        let all: Vec<&str> = [c, p, a, st].iter().filter_map(|x| **x).collect();
                        let mut uniq = all.clone();
                        uniq.sort();
                        uniq.dedup();
                        if uniq.len() != all.len() {
                            continue;
                        }
                        seen += 1;
                        let s = slots(*c, *p, *a, *st);
                        let (end, done) = settle("t", s.clone());
                        let whole: Vec<&str> = [c, p, a].iter().filter_map(|x| **x).collect();
                        let want = if all.contains(&"t") {
                            Some("t")
                        } else {
                            whole.first().copied()
                        };
                        assert_eq!(end.current.as_deref(), want, "{s:?}: {done:?}");
                        assert_eq!((end.aside.clone(), end.staging.clone()), (None, None));
                        let others = whole.iter().filter(|g| Some(**g) != want).count();
                        assert_eq!(end.previous.is_some(), others > 0, "{s:?}: {done:?}");
                    }
                }
            }
        }
        assert!(seen > 200, "{seen}");
    }
}
