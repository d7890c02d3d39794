//! Filter's shortcut for pods with claims: per node, which devices match each selector set a request uses and
//! which are in use, as bit masks, so that Filter answers from counts instead of an allocation attempt.
//!
//! Upstream's Filter (`pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`) runs the structured
//! allocator (`staging/src/k8s.io/dynamic-resource-allocation/structured/`, `Allocator.Allocate`) on every node it
//! is asked about; so did this core, and on a cluster of many device nodes that attempt was nearly all of a
//! cycle (each pod has its own claim, so the members of a gang cannot share Filter results). The answers here are
//! the allocator's on the nodes where counting decides:
//! - **short**: the devices of a selector set that are free on the node are fewer than the devices the requests
//!   of that set want (Hall's condition for that set, necessary for any assignment), so the allocator finds
//!   none;
//! - **fits**: every request is an `ExactCount` without admin access, no claim has constraints, the free devices
//!   of any two selector sets are the same or disjoint, and each set has enough. Then the allocator's search
//!   ([`super::allocator`]) fills the slots first fit without ever undoing a choice (each set's slots take a
//!   prefix of its free devices), in fewer steps than the square of the slots, which is kept within
//!   [`super::allocator::ALLOCATION_BUDGET`];
//! - otherwise the allocator runs (constraints, `All`, admin access, overlapping sets, a selector that fails to
//!   evaluate, a node with more than [`MAX_DEVICES`] devices, shared slices, a passed deadline).
//!
//! What is cached and for how long:
//! - [`DeviceIndex`], per [`NodeDevices`] map (by identity, [`DeviceCatalog::node_devices`]): the nodes, the
//!   position of each device, and per selector set ([`Group`], by the identity of its compiled selectors) the
//!   matching devices of each node, evaluated on a node's first visit. It outlives the catalogs that share the
//!   map (the benchmark updates the allocations of its catalog in place; the runtime's rebuilds share the map
//!   while no DeviceClass or ResourceSlice changes, [`crate::convert::DeviceSide`]);
//! - [`NodeRows`], per index: each snapshot node's row by its position in the snapshot, so that Filter finds a
//!   node's row without hashing and comparing its name (a cache miss on the name's bytes per node), and reads
//!   the rows in the order it visits the nodes; made from the snapshot's nodes at PreFilter when they are not
//!   the ones it holds; a node it does not hold is looked up by name;
//! - [`Held`], per catalog (by identity): the devices allocated claims hold on each node, from
//!   [`DeviceCatalog::allocated`] and [`DeviceCatalog::holders`]: one pass over the allocations for a new
//!   catalog, or for a catalog changed in place ([`DeviceCatalog::held_changes`]) the previous revision's table
//!   with the changed devices read again.
//!
//! Identity is the address of the `Arc`, remembered with a [`Weak`]: while the `Weak` lives the address cannot
//! be reused, and [`Arc::make_mut`] moves a value that a `Weak` still points at, so a changed map or catalog
//! never passes for the cached one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Instant;

use super::allocator::ALLOCATION_BUDGET;
use super::overlay::DeviceOverlay;
use super::verdict_memo::{Memo, Memos};
use super::{
    AllocationMode, ClaimRequests, DeviceCatalog, DeviceId, DeviceSelector, HeldChanges, NodeDevices,
};
use crate::fx::Fx;
use crate::model::{NodeInfo, NodeStatic};

/// Most devices of one node the masks cover (the bits of a `u128`); a node with more is left to the allocator.
pub const MAX_DEVICES: usize = 128;

/// How many device indexes and held tables are kept: the runtime's current one and the one before (a cycle
/// that started on it), plus room for tests and benchmarks that run several snapshots in one process.
const KEEP: usize = 2;

/// Most selector sets one index keeps; past it the set starts over (plans keep the groups they hold).
const MAX_GROUPS: usize = 256;

/// The devices of one selector set on every node of an index.
#[derive(Debug)]
pub struct Group {
    /// The selectors (a class's, then the request's), kept so that their identities stay theirs.
    selectors: Vec<DeviceSelector>,
    /// Per node: the devices every selector accepts (bit `i` for the node's `i`-th device), or `None` when a
    /// selector failed on one of them (the allocator reports that error). Evaluated on the node's first visit.
    masks: Box<[OnceLock<Option<u128>>]>,
}

impl Group {
    fn same(&self, selectors: &[DeviceSelector]) -> bool {
        self.selectors.len() == selectors.len()
            && self
                .selectors
                .iter()
                .zip(selectors)
                .all(|(a, b)| a.identity() == b.identity())
    }

    /// The mask of node `i` (named `name`), evaluating the selectors as the allocator does: in order, stopping
    /// at the first that says no.
    fn mask(&self, i: usize, name: &str, catalog: &DeviceCatalog) -> Option<u128> {
        *self.masks[i].get_or_init(|| {
            let mut mask = 0u128;
            for (bit, d) in catalog.node_devices.get(name)?.iter().enumerate() {
                let mut ok = true;
                for s in &self.selectors {
                    match s.matches(d) {
                        Ok(true) => {}
                        Ok(false) => {
                            ok = false;
                            break;
                        }
                        Err(_) => return None,
                    }
                }
                if ok {
                    mask |= 1 << bit;
                }
            }
            Some(mask)
        })
    }
}

/// The nodes of one [`NodeDevices`] map and their devices' positions, with the selector sets seen so far.
#[derive(Debug)]
pub struct DeviceIndex {
    source: Weak<NodeDevices>,
    /// Node name → its position in `names`.
    by_name: HashMap<Arc<str>, u32, Fx>,
    /// Node names, and whether the node has more than [`MAX_DEVICES`] devices.
    names: Vec<(Arc<str>, bool)>,
    /// Device → its node and position there (nodes within [`MAX_DEVICES`] only).
    slots: HashMap<DeviceId, (u32, u8), Fx>,
    /// The same by the address of the device name's allocation, which an allocation made from the catalog's
    /// own ids shares: a hash of one word instead of three strings, for the pass over every allocated device
    /// per catalog. A hit counts only when the whole id is equal (the kept id also keeps the address its own).
    by_address: HashMap<usize, (DeviceId, u32, u8), Fx>,
    groups: Mutex<Vec<Arc<Group>>>,
    /// The rows of the last snapshot's nodes ([`NodeRows::learn`]).
    node_rows: Mutex<Arc<NodeRows>>,
}

/// A row of [`DeviceIndex`] for a node without devices (not among its names).
const NO_ROW: u32 = u32::MAX;

/// The rows in a [`DeviceIndex`] of one snapshot's nodes, by the node's position in the snapshot: Filter visits
/// the nodes in the snapshot's order (from a rotating start), so it reads this table, and the index's rows (made
/// in the same order, [`DeviceIndex::build`]), one after the other instead of at random. A position's entry
/// counts only when it holds the node's own [`NodeStatic`] (by address: the snapshot keeps a node's
/// `Arc<NodeStatic>` until the node changes, and holding a clone here keeps the address from being reused by
/// another node); any other node is looked up by name.
#[derive(Debug, Default)]
pub struct NodeRows {
    /// Per snapshot position: the node's `NodeStatic` (held, and compared by address) and its row, or
    /// [`NO_ROW`].
    positions: Vec<(Arc<NodeStatic>, u32)>,
}

impl NodeRows {
    /// The rows of `index` for the snapshot `nodes`: the current ones when they have as many nodes and the same
    /// first and last (a node changed since is then looked up by name), else made anew.
    fn learn(index: &DeviceIndex, nodes: &[NodeInfo]) -> Arc<NodeRows> {
        let mut current = index.node_rows.lock().unwrap_or_else(PoisonError::into_inner);
        let same = |at: usize| {
            current
                .positions
                .get(at)
                .is_some_and(|(node, _)| Arc::ptr_eq(node, &nodes[at].node))
        };
        if nodes.is_empty() || (current.positions.len() == nodes.len() && same(0) && same(nodes.len() - 1)) {
            return current.clone();
        }
        let row = |n: &NodeInfo| index.by_name.get(&*n.node.name).copied().unwrap_or(NO_ROW);
        *current = Arc::new(NodeRows {
            positions: nodes.iter().map(|n| (n.node.clone(), row(n))).collect(),
        });
        current.clone()
    }
}

/// Where a plan finds the snapshot's nodes: the address of the first and how many, so that a node's position
/// is its offset from the first.
#[derive(Debug, Clone, Copy, Default)]
struct Positions {
    first: usize,
    count: usize,
}

impl Positions {
    fn of(nodes: &[NodeInfo]) -> Positions {
        Positions {
            first: nodes.as_ptr() as usize,
            count: nodes.len(),
        }
    }

    /// The row of `node` when it is the snapshot node at its position in `rows`.
    fn row(self, rows: &NodeRows, node: &NodeInfo) -> Option<u32> {
        let offset = (std::ptr::from_ref(node) as usize).wrapping_sub(self.first);
        let size = std::mem::size_of::<NodeInfo>();
        let at = offset / size;
        if !offset.is_multiple_of(size) || at >= self.count {
            return None;
        }
        let (held, row) = rows.positions.get(at)?;
        Arc::ptr_eq(held, &node.node).then_some(*row)
    }
}

impl DeviceIndex {
    /// The index of `devices`, with the rows of the devices of `nodes` (a snapshot's) first, in their order.
    fn build(devices: &Arc<NodeDevices>, nodes: &[NodeInfo]) -> DeviceIndex {
        // Sized up front: growing the maps of some 40,000 devices rehashed them several times.
        let count: usize = devices
            .values()
            .map(|l| if l.len() > MAX_DEVICES { 0 } else { l.len() })
            .sum();
        let mut index = DeviceIndex {
            source: Arc::downgrade(devices),
            by_name: HashMap::with_capacity_and_hasher(devices.len(), Fx::default()),
            names: Vec::with_capacity(devices.len()),
            slots: HashMap::with_capacity_and_hasher(count, Fx::default()),
            by_address: HashMap::with_capacity_and_hasher(count, Fx::default()),
            groups: Mutex::default(),
            node_rows: Mutex::default(),
        };
        let in_snapshot = nodes.iter().filter_map(|n| devices.get_key_value(&*n.node.name));
        for (name, list) in in_snapshot.chain(devices.iter()) {
            if index.by_name.contains_key(name) {
                continue;
            }
            let i = u32::try_from(index.names.len()).unwrap_or(u32::MAX);
            let big = list.len() > MAX_DEVICES;
            index.by_name.insert(name.clone(), i);
            index.names.push((name.clone(), big));
            if !big {
                for (pos, d) in list.iter().enumerate() {
                    let pos = u8::try_from(pos).unwrap_or(u8::MAX);
                    index.slots.insert(d.id.clone(), (i, pos));
                    index.by_address.insert(address(&d.id), (d.id.clone(), i, pos));
                }
            }
        }
        index
    }

    /// The node and position of `device`.
    fn slot(&self, device: &DeviceId) -> Option<(u32, u8)> {
        match self.by_address.get(&address(device)) {
            Some((id, i, pos)) if same(id, device) => Some((*i, *pos)),
            _ => self.slots.get(device).copied(),
        }
    }

    /// The group of `selectors`, made on first use.
    fn group(&self, selectors: &[DeviceSelector]) -> Arc<Group> {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(g) = groups.iter().find(|g| g.same(selectors)) {
            return g.clone();
        }
        if groups.len() >= MAX_GROUPS {
            groups.clear();
        }
        let g = Arc::new(Group {
            selectors: selectors.to_vec(),
            masks: (0..self.names.len()).map(|_| OnceLock::new()).collect(),
        });
        groups.push(g.clone());
        g
    }
}

/// The devices allocated claims hold, per node of an index, for one catalog.
#[derive(Debug)]
pub struct Held {
    catalog: Weak<DeviceCatalog>,
    /// The catalog's [`DeviceCatalog::revision`], for the next revision's update.
    revision: u64,
    index: Arc<DeviceIndex>,
    /// Per node, in one row so that Filter reads one cache line: devices held whatever the node's pods are;
    /// devices whose claim is reserved only for pods on this node, held while one of them is still there
    /// ([`DeviceCatalog::held`] answers, at Filter time: preemption takes pods off in its simulations); whether
    /// the node has more than [`MAX_DEVICES`] devices.
    rows: Vec<(u128, u128, bool)>,
    /// Filter's verdicts per row and demand ([`super::verdict_memo`]), forgotten for the rows marked again.
    memos: Memos<Group>,
}

impl Held {
    fn build(catalog: &Arc<DeviceCatalog>, index: Arc<DeviceIndex>) -> Held {
        let rows = empty_rows(&index);
        let mut h = Held {
            catalog: Arc::downgrade(catalog),
            revision: catalog.revision,
            memos: Memos::new(rows.len()),
            rows,
            index,
        };
        for device in catalog.allocated.keys() {
            h.mark(catalog, device);
        }
        h
    }

    /// The table of `catalog` from `rows` and `memos`, those of the table of revision `changes.since` in
    /// `index`, with the changed devices' bits read again and their nodes' verdicts forgotten.
    fn update(
        rows: Vec<(u128, u128, bool)>,
        memos: Memos<Group>,
        index: &Arc<DeviceIndex>,
        catalog: &Arc<DeviceCatalog>,
        changes: &HeldChanges,
    ) -> Held {
        let mut h = Held {
            catalog: Arc::downgrade(catalog),
            revision: catalog.revision,
            rows,
            memos: Memos::new(0),
            index: index.clone(),
        };
        let changed: Vec<usize> = changes
            .devices
            .iter()
            .filter_map(|d| h.mark(catalog, d))
            .collect();
        h.memos = memos.next(&changed);
        h
    }

    /// Sets the bits of `device` (if the index has it) from `catalog`: held whatever the node's pods are, held
    /// while one of its claim's pods is on the node, or free. The node's row, when the index has the device.
    fn mark(&mut self, catalog: &DeviceCatalog, device: &DeviceId) -> Option<usize> {
        let (i, pos) = self.index.slot(device)?;
        let (i, bit) = (i as usize, 1u128 << pos);
        self.rows[i].0 &= !bit;
        self.rows[i].1 &= !bit;
        let Some(claim) = catalog.allocated.get(device) else {
            return Some(i);
        };
        let name = &self.index.names[i].0;
        let always = catalog
            .holders
            .get(claim)
            .is_none_or(|pods| pods.is_empty() || pods.iter().any(|(_, on)| on != name));
        if always {
            self.rows[i].0 |= bit;
        } else {
            self.rows[i].1 |= bit;
        }
        Some(i)
    }
}

/// `a == b`, without reading the strings when they are the same allocations (`Arc<str>`'s equality compares
/// the bytes).
fn same(a: &DeviceId, b: &DeviceId) -> bool {
    (Arc::ptr_eq(&a.device, &b.device) && Arc::ptr_eq(&a.pool, &b.pool) && Arc::ptr_eq(&a.driver, &b.driver))
        || a == b
}

fn address(id: &DeviceId) -> usize {
    Arc::as_ptr(&id.device).cast::<u8>() as usize
}

/// A row per node of `index`, nothing held.
fn empty_rows(index: &DeviceIndex) -> Vec<(u128, u128, bool)> {
    index.names.iter().map(|(_, big)| (0, 0, *big)).collect()
}

fn remember<T>(cache: &Mutex<Vec<Arc<T>>>, hit: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> Arc<T> {
    let mut c = cache.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(x) = c.iter().find(|x| hit(x)) {
        return x.clone();
    }
    let x = Arc::new(make());
    if c.len() >= KEEP {
        c.remove(0);
    }
    c.push(x.clone());
    x
}

/// The held table of `catalog` (and through it the device index of its devices, whose rows follow the order of
/// `nodes`, a snapshot's, when it is made here), built on first use; `None` when the catalog has devices of
/// shared slices (node selectors, `allNodes`), which the masks do not cover.
pub fn held(catalog: &Arc<DeviceCatalog>, nodes: &[NodeInfo]) -> Option<Arc<Held>> {
    static INDEXES: Mutex<Vec<Arc<DeviceIndex>>> = Mutex::new(Vec::new());
    static HELD: Mutex<Vec<Arc<Held>>> = Mutex::new(Vec::new());
    if !catalog.shared_devices.is_empty() {
        return None;
    }
    let devices = &catalog.node_devices;
    let index = remember(
        &INDEXES,
        |x| std::ptr::eq(x.source.as_ptr(), Arc::as_ptr(devices)),
        || DeviceIndex::build(devices, nodes),
    );
    let mut kept = HELD.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(h) = kept
        .iter()
        .find(|h| std::ptr::eq(h.catalog.as_ptr(), Arc::as_ptr(catalog)) && Arc::ptr_eq(&h.index, &index))
    {
        return Some(h.clone());
    }
    let previous = catalog.held_changes.as_ref().and_then(|c| {
        kept.iter()
            .position(|h| h.revision == c.since && Arc::ptr_eq(&h.index, &index))
            .map(|at| (at, c))
    });
    let h = Arc::new(match previous {
        Some((at, changes)) => {
            // The previous revision's table is taken over when nothing else holds it (its catalog was changed
            // into this one), so that its rows are not copied; else it stays for whoever holds it.
            let p = kept.remove(at);
            match Arc::try_unwrap(p) {
                Ok(p) => Held::update(p.rows, p.memos, &p.index, catalog, changes),
                Err(p) => {
                    let h = Held::update(p.rows.clone(), p.memos.copy(), &p.index, catalog, changes);
                    kept.push(p);
                    h
                }
            }
        }
        None => Held::build(catalog, index),
    });
    if kept.len() >= KEEP {
        kept.remove(0);
    }
    kept.push(h.clone());
    Some(h)
}

/// What a set of claims wants, per selector set of a plan.
#[derive(Debug, Clone, Default)]
struct Demand {
    /// Devices wanted per group of the plan, by `ExactCount` requests without admin access.
    per_group: Vec<u32>,
    /// Some request is `All` or has admin access, or a claim has constraints or unusable requests: counting can
    /// only reject.
    complex: bool,
}

impl Demand {
    fn add(&mut self, claim: Result<&ClaimRequests, ()>, groups: &mut Vec<Arc<Group>>, index: &DeviceIndex) {
        let Ok(claim) = claim else {
            self.complex = true;
            return;
        };
        self.complex |= !claim.constraints.is_empty();
        for r in &claim.requests {
            let AllocationMode::ExactCount(n) = r.mode else {
                self.complex = true;
                continue;
            };
            if r.admin_access {
                self.complex = true;
                continue;
            }
            let g = match groups.iter().position(|g| g.same(&r.selectors)) {
                Some(g) => g,
                None => {
                    groups.push(index.group(&r.selectors));
                    groups.len() - 1
                }
            };
            if self.per_group.len() <= g {
                self.per_group.resize(g + 1, 0);
            }
            self.per_group[g] = self.per_group[g].saturating_add(n);
        }
    }

    fn of(&self, g: usize) -> u32 {
        self.per_group.get(g).copied().unwrap_or(0)
    }
}

/// A node with claims allocated in this cycle: the devices claims outside the joint allocation took there, and
/// what the claims allocated again with the pod's (those of one pod only) want.
#[derive(Debug, Clone, Default)]
struct CycleNode {
    taken: u128,
    movable: Demand,
}

/// The counts Filter reads for one pod's new claims (built by PreFilter, [`super::scheduling::plan`]).
#[derive(Debug)]
pub struct FastPlan {
    held: Arc<Held>,
    /// The snapshot nodes' rows in the held table's index, and where the snapshot's nodes are.
    rows: Arc<NodeRows>,
    positions: Positions,
    groups: Vec<Arc<Group>>,
    new: Demand,
    /// Nodes with claims allocated in this cycle, by index.
    cycle: HashMap<u32, CycleNode, Fx>,
    /// Bit `i % 64` of every index in `cycle`: most nodes have none, and a clear bit says so without a lookup.
    cycle_bits: u64,
    /// Verdicts given, for reading the clock every [`CLOCK_EVERY`] of them.
    calls: AtomicU32,
    /// The verdicts of earlier plans with the same demand, on nodes this cycle has not allocated on.
    memo: Option<Arc<Memo<Group>>>,
}

impl Clone for FastPlan {
    fn clone(&self) -> Self {
        FastPlan {
            held: self.held.clone(),
            rows: self.rows.clone(),
            positions: self.positions,
            groups: self.groups.clone(),
            new: self.new.clone(),
            cycle: self.cycle.clone(),
            cycle_bits: self.cycle_bits,
            calls: AtomicU32::new(0),
            memo: self.memo.clone(),
        }
    }
}

/// How many verdicts go between two reads of the clock, as many as the allocator's steps between its reads: a
/// verdict takes tens of nanoseconds, so the deadline is seen at most some microseconds late, and at 32 the
/// clock was still a few percent of a cycle. The first verdict of a plan reads it.
const CLOCK_EVERY: u32 = 256;

/// What counting says of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The allocator would allocate.
    Fits,
    /// The allocator would find no assignment.
    Short,
    /// Counting cannot tell: allocate.
    Search,
}

impl Verdict {
    /// The code a [`Memo`] keeps (never 0).
    fn code(self) -> u8 {
        match self {
            Verdict::Fits => 1,
            Verdict::Short => 2,
            Verdict::Search => 3,
        }
    }

    fn decode(code: u8) -> Option<Verdict> {
        match code {
            1 => Some(Verdict::Fits),
            2 => Some(Verdict::Short),
            3 => Some(Verdict::Search),
            _ => None,
        }
    }
}

impl FastPlan {
    /// The plan for the pod's `new` claims given this cycle's allocations, for the snapshot's `nodes` (their
    /// rows are learnt once per index; any other node is found by name); `None` when the masks do not cover the
    /// catalog or the cycle's allocations (see [`held`]).
    pub fn new(
        catalog: &Arc<DeviceCatalog>,
        overlay: &DeviceOverlay,
        new: &[Arc<super::ResourceClaimInfo>],
        nodes: &[NodeInfo],
    ) -> Option<FastPlan> {
        let held = held(catalog, nodes)?;
        let index = &held.index;
        let rows = NodeRows::learn(index, nodes);
        let positions = Positions::of(nodes);
        let mut groups = Vec::new();
        let mut demand = Demand::default();
        for c in new {
            demand.add(c.requests.as_ref().map_err(|_| ()), &mut groups, index);
        }
        let mut cycle: HashMap<u32, CycleNode, Fx> = HashMap::default();
        for (node, allocations) in overlay.nodes() {
            let &i = index.by_name.get(node)?;
            let entry = cycle.entry(i).or_default();
            for (key, a) in &allocations.claims {
                // As `overlay_movable` does: a claim of one pod is allocated again with the new pod's.
                let movable = if overlay.users(key) == 1 {
                    catalog.claims.get(key)
                } else {
                    None
                };
                if let Some(info) = movable {
                    entry
                        .movable
                        .add(info.requests.as_ref().map_err(|_| ()), &mut groups, index);
                    continue;
                }
                for (_, d, admin) in &a.devices {
                    if !admin {
                        let (on, pos) = index.slot(d)?;
                        if on != i {
                            return None;
                        }
                        entry.taken |= 1 << pos;
                    }
                }
            }
        }
        let wants = (0..groups.len())
            .filter(|&g| demand.of(g) > 0)
            .map(|g| (groups[g].clone(), demand.of(g)))
            .collect();
        Some(FastPlan {
            memo: held.memos.for_demand(wants),
            held,
            rows,
            positions,
            groups,
            new: demand,
            cycle_bits: cycle.keys().fold(0, |bits, i| bits | 1 << (i % 64)),
            cycle,
            calls: AtomicU32::new(0),
        })
    }

    /// What counting says of `node` for `catalog` (the plan's); [`Verdict::Search`] once `deadline` is seen
    /// passed (the clock is read every [`CLOCK_EVERY`] verdicts), so that the allocator reports the timeout.
    pub fn verdict(&self, catalog: &DeviceCatalog, node: &NodeInfo, deadline: Option<Instant>) -> Verdict {
        if let Some(d) = deadline {
            // A load and a store, not an atomic add: the count only paces the clock, and a count lost to a
            // concurrent verdict reads it one verdict later.
            let n = self.calls.load(Ordering::Relaxed);
            self.calls.store(n.wrapping_add(1), Ordering::Relaxed);
            if n.is_multiple_of(CLOCK_EVERY) && Instant::now() >= d {
                // Every later verdict searches too.
                self.calls.store(0, Ordering::Relaxed);
                return Verdict::Search;
            }
        }
        let index = &self.held.index;
        let name = &*node.node.name;
        let i = self
            .positions
            .row(&self.rows, node)
            .unwrap_or_else(|| index.by_name.get(name).copied().unwrap_or(NO_ROW));
        if i == NO_ROW {
            // No devices: only claims that want none fit.
            let wants = self.new.per_group.iter().any(|&n| n > 0);
            return match (wants, self.new.complex) {
                (true, _) => Verdict::Short,
                (false, true) => Verdict::Search,
                (false, false) => Verdict::Fits,
            };
        }
        let at = i as usize;
        let here = if self.cycle_bits & (1 << (i % 64)) == 0 {
            None
        } else {
            self.cycle.get(&i)
        };
        // Read before the held row: an answer is only kept for a row without devices that depend on the node's
        // pods, and a row marked since has its answers forgotten, so a kept answer holds without reading it.
        let memo = self.memo.as_ref().filter(|_| here.is_none());
        if let Some(v) = memo.and_then(|m| m.get(at)).and_then(Verdict::decode) {
            return v;
        }
        let (in_use, depends, big) = self.held.rows[at];
        if big {
            return Verdict::Search;
        }
        let v = self.count(catalog, node, at, (in_use, depends), here);
        // Nodes whose held devices depend on their pods, or that this cycle allocated on, are counted each time.
        if let Some(m) = memo.filter(|_| depends == 0) {
            m.set(at, v.code());
        }
        v
    }

    /// What counting says of `node`, row `at` of the held table whose `(in_use, depends)` masks are given, with
    /// `here` this cycle's allocations on it.
    fn count(
        &self,
        catalog: &DeviceCatalog,
        node: &NodeInfo,
        at: usize,
        (mut in_use, depends): (u128, u128),
        here: Option<&CycleNode>,
    ) -> Verdict {
        let name = &*node.node.name;
        if depends != 0
            && let Some(devices) = catalog.node_devices.get(name)
        {
            for (bit, d) in devices.iter().enumerate().take(MAX_DEVICES) {
                if depends & (1 << bit) != 0 && catalog.held(&d.id, node) {
                    in_use |= 1 << bit;
                }
            }
        }
        let (taken, complex) = here.map_or((0, false), |c| (c.taken, c.movable.complex));
        in_use |= taken;
        let wanted = |g: usize| self.new.of(g).saturating_add(here.map_or(0, |c| c.movable.of(g)));
        let free = |g: usize| self.groups[g].mask(at, name, catalog).map(|m| m & !in_use);
        let mut slots = 0u64;
        let mut active = 0;
        for g in 0..self.groups.len() {
            let want = wanted(g);
            if want == 0 {
                continue;
            }
            let Some(f) = free(g) else {
                return Verdict::Search;
            };
            if f.count_ones() < want {
                return Verdict::Short;
            }
            slots += u64::from(want);
            active += 1;
        }
        if complex || self.new.complex || slots.saturating_mul(slots) > ALLOCATION_BUDGET {
            return Verdict::Search;
        }
        if active > 1 {
            return self.overlapping(&wanted, &free);
        }
        Verdict::Fits
    }

    /// For several selector sets with demand: [`Verdict::Fits`] when any two have the same free devices or
    /// none in common and each set of equal ones has enough, [`Verdict::Short`] when equal ones together want
    /// more than they have, [`Verdict::Search`] when two overlap.
    fn overlapping(&self, wanted: &dyn Fn(usize) -> u32, free: &dyn Fn(usize) -> Option<u128>) -> Verdict {
        for a in 0..self.groups.len() {
            if wanted(a) == 0 {
                continue;
            }
            let Some(fa) = free(a) else {
                return Verdict::Search;
            };
            let mut together = 0u32;
            for b in 0..self.groups.len() {
                let want_b = wanted(b);
                if want_b == 0 {
                    continue;
                }
                let Some(fb) = free(b) else {
                    return Verdict::Search;
                };
                if fa == fb {
                    together = together.saturating_add(want_b);
                } else if fa & fb != 0 {
                    return Verdict::Search;
                }
            }
            if fa.count_ones() < together {
                return Verdict::Short;
            }
        }
        Verdict::Fits
    }
}

#[cfg(test)]
#[path = "summary_tests.rs"]
mod tests;
