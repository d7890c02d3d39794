//! Filter's counting verdicts ([`super::summary::FastPlan::verdict`]) remembered per node, for every pod that
//! wants the same devices.
//!
//! A verdict on a node that this cycle has allocated nothing on is a function of three things: the devices held
//! there (the node's row of the held table), the node's matching devices per selector set (fixed while the
//! device index lives) and what the pod's new claims want per set. The pods of a gang made from one template
//! want the same, and Filter walks the nodes from where the previous pod stopped (upstream's
//! `nextStartNodeIndex`), so each node is asked about again and again while its row stays the same. A [`Memo`]
//! keeps the answer per node row for one demand; the held table keeps its memos and forgets a node's answers
//! whenever it marks that node's row again (a device allocated or freed there), so an answer read is always the
//! one counting would give now. Nodes this cycle has allocated on, and nodes whose held devices depend on their
//! pods, are counted every time (see the caller).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// No answer kept for a node.
const UNKNOWN: u8 = 0;

/// Most memos one held table keeps: one per distinct demand (claim shape); past it, new demands are counted
/// without one.
const MAX_MEMOS: usize = 16;

/// The answers for one demand: per node row, a verdict code (`1..=255`, the caller's encoding) or none.
#[derive(Debug)]
pub(crate) struct Memo<G> {
    /// The selector sets with demand, in the plan's order, and the devices each wants; kept so that their
    /// identities (addresses) cannot be reused while the memo lives.
    wants: Vec<(Arc<G>, u32)>,
    cells: Box<[AtomicU8]>,
}

impl<G> Memo<G> {
    fn new(wants: Vec<(Arc<G>, u32)>, rows: usize) -> Memo<G> {
        Memo {
            wants,
            cells: (0..rows).map(|_| AtomicU8::new(UNKNOWN)).collect(),
        }
    }

    fn is_for(&self, wants: &[(Arc<G>, u32)]) -> bool {
        self.wants.len() == wants.len()
            && self
                .wants
                .iter()
                .zip(wants)
                .all(|((a, n), (b, m))| Arc::ptr_eq(a, b) && n == m)
    }

    /// The code kept for `row`, if any.
    pub(crate) fn get(&self, row: usize) -> Option<u8> {
        let code = self.cells.get(row)?.load(Ordering::Relaxed);
        (code != UNKNOWN).then_some(code)
    }

    /// Keeps `code` (not 0) for `row`. Two plans that race store the same answer.
    pub(crate) fn set(&self, row: usize, code: u8) {
        if let Some(c) = self.cells.get(row) {
            c.store(code, Ordering::Relaxed);
        }
    }

    fn copy(&self) -> Memo<G> {
        Memo {
            wants: self.wants.clone(),
            cells: self
                .cells
                .iter()
                .map(|c| AtomicU8::new(c.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

/// The memos of one held table.
#[derive(Debug)]
pub(crate) struct Memos<G> {
    rows: usize,
    list: Mutex<Vec<Arc<Memo<G>>>>,
}

impl<G> Memos<G> {
    /// No memos, for a table of `rows` node rows.
    pub(crate) fn new(rows: usize) -> Memos<G> {
        Memos {
            rows,
            list: Mutex::default(),
        }
    }

    /// The memo for `wants` (selector sets with demand, in order), made empty when there is none yet; `None`
    /// once [`MAX_MEMOS`] other demands have theirs.
    pub(crate) fn for_demand(&self, wants: Vec<(Arc<G>, u32)>) -> Option<Arc<Memo<G>>> {
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = list.iter().find(|m| m.is_for(&wants)) {
            return Some(m.clone());
        }
        if list.len() >= MAX_MEMOS {
            return None;
        }
        let m = Arc::new(Memo::new(wants, self.rows));
        list.push(m.clone());
        Some(m)
    }

    /// The memos for the next revision of the table, with the answers of `changed` rows forgotten: taken over
    /// where no plan of this revision still holds one, copied where one does (so that a plan counting on the old
    /// rows cannot store an old answer into the new memo).
    pub(crate) fn next(self, changed: &[usize]) -> Memos<G> {
        let list = self.list.into_inner().unwrap_or_else(PoisonError::into_inner);
        let list = list
            .into_iter()
            .map(|m| {
                let m = Arc::try_unwrap(m).unwrap_or_else(|shared| shared.copy());
                for &row in changed {
                    if let Some(c) = m.cells.get(row) {
                        c.store(UNKNOWN, Ordering::Relaxed);
                    }
                }
                Arc::new(m)
            })
            .collect();
        Memos {
            rows: self.rows,
            list: Mutex::new(list),
        }
    }

    /// A copy, for a revision made from a table that stays in use.
    pub(crate) fn copy(&self) -> Memos<G> {
        let list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        Memos {
            rows: self.rows,
            list: Mutex::new(list.iter().map(|m| Arc::new(m.copy())).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_row_is_forgotten_and_a_held_memo_is_not_written_through() {
        let a = Arc::new("set a");
        let memos = Memos::new(4);
        let m = memos.for_demand(vec![(a.clone(), 1)]).expect("room");
        m.set(0, 1);
        m.set(2, 2);
        assert!(Arc::ptr_eq(
            &m,
            &memos.for_demand(vec![(a.clone(), 1)]).expect("room")
        ));
        assert!(
            memos
                .for_demand(vec![(a.clone(), 2)])
                .is_some_and(|o| !Arc::ptr_eq(&o, &m))
        );
        // `m` is still held (a plan of the old revision): the next revision gets a copy.
        let next = memos.next(&[2]);
        let n = next.for_demand(vec![(a.clone(), 1)]).expect("kept");
        assert_eq!((n.get(0), n.get(2)), (Some(1), None));
        m.set(0, 2);
        assert_eq!(
            n.get(0),
            Some(1),
            "the old revision's plan wrote into the new memo"
        );
        assert_eq!(m.get(2), Some(2), "the old revision's memo lost an answer");
    }

    #[test]
    fn demands_past_the_bound_go_without() {
        let a = Arc::new(0u8);
        let memos = Memos::new(1);
        for n in 0..MAX_MEMOS as u32 {
            assert!(memos.for_demand(vec![(a.clone(), n)]).is_some());
        }
        assert!(memos.for_demand(vec![(a.clone(), 99)]).is_none());
        assert!(
            memos.for_demand(vec![(a, 0)]).is_some(),
            "a known demand keeps its memo"
        );
    }
}
