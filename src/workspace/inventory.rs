//! The per-request ownership inventory.
//!
//! Entry 0 is the job directory itself; every other entry names one artifact
//! by its parent entry and a single-component name, with its kind and the
//! identity recorded when the helper created it. Names live in one shared
//! byte arena, so registering an artifact allocates nothing beyond the entry
//! (amortised growth of two vectors).

use crate::fs::{FileKind, Identity};

/// Index of the job directory in every inventory.
pub const JOB_ROOT: u32 = 0;

/// What kind of artifact an entry registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArtifactKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
}

impl ArtifactKind {
    /// The file kind a registered artifact must still have.
    pub fn file_kind(self) -> FileKind {
        match self {
            ArtifactKind::Dir => FileKind::Dir,
            ArtifactKind::File => FileKind::File,
        }
    }
}

/// One registered artifact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    parent: u32,
    name_start: u32,
    name_len: u32,
    /// The kind created.
    pub kind: ArtifactKind,
    /// The identity recorded at creation.
    pub identity: Identity,
}

impl Entry {
    /// The entry's parent (the job root is its own parent).
    pub fn parent(&self) -> u32 {
        self.parent
    }
}

/// Why an artifact could not be registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InventoryError {
    /// The parent index is not a registered directory.
    #[error("parent {parent} is not a registered directory")]
    ParentNotDir {
        /// The refused parent index.
        parent: u32,
    },
    /// The inventory holds `u32::MAX` entries or names.
    #[error("the inventory is full")]
    Full,
}

/// A request's ownership inventory.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    entries: Vec<Entry>,
    names: Vec<u8>,
}

impl Inventory {
    /// An inventory holding only the job directory with `identity`.
    pub fn new(job_identity: Identity) -> Self {
        Inventory {
            entries: vec![Entry {
                parent: JOB_ROOT,
                name_start: 0,
                name_len: 0,
                kind: ArtifactKind::Dir,
                identity: job_identity,
            }],
            names: Vec::new(),
        }
    }

    /// Registers `name` under `parent` and returns its index.
    ///
    /// `name` must already be a validated single component; a name that is
    /// registered again (the earlier artifact vanished and the helper created
    /// a new one with `O_EXCL`) supersedes the earlier entry in cleanup.
    ///
    /// # Errors
    ///
    /// [`InventoryError`] if `parent` is not a registered directory or the
    /// inventory is full.
    pub fn register(
        &mut self,
        parent: u32,
        name: &[u8],
        kind: ArtifactKind,
        identity: Identity,
    ) -> Result<u32, InventoryError> {
        match self.entries.get(parent as usize) {
            Some(e) if e.kind == ArtifactKind::Dir => {}
            _ => return Err(InventoryError::ParentNotDir { parent }),
        }
        let index = u32::try_from(self.entries.len()).map_err(|_| InventoryError::Full)?;
        let name_start = u32::try_from(self.names.len()).map_err(|_| InventoryError::Full)?;
        let name_len = u32::try_from(name.len()).map_err(|_| InventoryError::Full)?;
        name_start
            .checked_add(name_len)
            .ok_or(InventoryError::Full)?;
        self.names.extend_from_slice(name);
        self.entries.push(Entry {
            parent,
            name_start,
            name_len,
            kind,
            identity,
        });
        Ok(index)
    }

    /// Number of entries, the job directory included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: the job directory is entry 0.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at `index`.
    ///
    /// # Panics
    ///
    /// If `index` is out of range (indices come from [`Inventory::register`]).
    pub fn entry(&self, index: u32) -> &Entry {
        &self.entries[index as usize]
    }

    /// The single-component name of `index` (empty for the job root).
    pub fn name(&self, index: u32) -> &[u8] {
        let e = &self.entries[index as usize];
        &self.names[e.name_start as usize..(e.name_start + e.name_len) as usize]
    }

    /// The latest registered child of `parent` named `name`, by linear scan.
    pub fn find_child(&self, parent: u32, name: &[u8]) -> Option<u32> {
        (1..self.entries.len() as u32)
            .rev()
            .find(|&i| self.entries[i as usize].parent == parent && self.name(i) == name)
    }

    /// `a/b/c`, relative to the job directory (lossy UTF-8), for operators'
    /// logs only: it never goes on the wire.
    pub fn relative_path(&self, index: u32) -> String {
        let mut parts = Vec::new();
        let mut i = index;
        while i != JOB_ROOT {
            parts.push(String::from_utf8_lossy(self.name(i)).into_owned());
            i = self.entries[i as usize].parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// Counts of (directories, files), the job directory included.
    pub fn counts(&self) -> (usize, usize) {
        let dirs = self
            .entries
            .iter()
            .filter(|e| e.kind == ArtifactKind::Dir)
            .count();
        (dirs, self.entries.len() - dirs)
    }
}

/// The inventory arranged for traversal: children of each directory sorted
/// by name, superseded duplicates dropped.
#[derive(Debug)]
pub struct Tree {
    /// Entry indices (never the root) sorted by `(parent, name)`.
    order: Vec<u32>,
}

impl Tree {
    /// Builds the traversal order of `inv`.
    pub fn new(inv: &Inventory) -> Self {
        let mut order: Vec<u32> = (1..inv.len() as u32).collect();
        // Stable sort keeps registration order among equal names, so the
        // latest of a duplicate is last; drop all but it.
        order.sort_by(|&a, &b| {
            (inv.entry(a).parent, inv.name(a)).cmp(&(inv.entry(b).parent, inv.name(b)))
        });
        let mut kept: Vec<u32> = Vec::with_capacity(order.len());
        for i in order {
            if let Some(&last) = kept.last() {
                if inv.entry(last).parent == inv.entry(i).parent && inv.name(last) == inv.name(i) {
                    *kept.last_mut().expect("checked") = i;
                    continue;
                }
            }
            kept.push(i);
        }
        Tree { order: kept }
    }

    /// The registered children of `dir`, sorted by name.
    pub fn children(&self, inv: &Inventory, dir: u32) -> &[u32] {
        let lo = self.order.partition_point(|&i| inv.entry(i).parent < dir);
        let hi = self.order.partition_point(|&i| inv.entry(i).parent <= dir);
        &self.order[lo..hi]
    }

    /// The registered child of `dir` named `name`.
    pub fn child(&self, inv: &Inventory, dir: u32, name: &[u8]) -> Option<u32> {
        let kids = self.children(inv, dir);
        kids.binary_search_by(|&i| inv.name(i).cmp(name))
            .ok()
            .map(|k| kids[k])
    }

    /// Every live (non-superseded) entry, the root excluded.
    pub fn children_all(&self) -> &[u32] {
        &self.order
    }

    /// Number of live (non-superseded) entries, the root excluded.
    pub fn live(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(ino: u64) -> Identity {
        Identity {
            dev: 1,
            ino,
            mount: None,
            btime: None,
        }
    }

    #[test]
    fn registers_paths_and_finds_children() {
        let mut inv = Inventory::new(ident(1));
        let a = inv
            .register(JOB_ROOT, b"a", ArtifactKind::Dir, ident(2))
            .unwrap();
        let b = inv.register(a, b"b", ArtifactKind::Dir, ident(3)).unwrap();
        let f = inv
            .register(b, b"f.txt", ArtifactKind::File, ident(4))
            .unwrap();
        let g = inv
            .register(JOB_ROOT, b"g", ArtifactKind::File, ident(5))
            .unwrap();
        assert_eq!(inv.relative_path(f), "a/b/f.txt");
        assert_eq!(inv.relative_path(JOB_ROOT), "");
        assert_eq!(inv.find_child(a, b"b"), Some(b));
        assert_eq!(inv.find_child(JOB_ROOT, b"b"), None);
        assert_eq!(inv.counts(), (3, 2));
        let tree = Tree::new(&inv);
        assert_eq!(tree.children(&inv, JOB_ROOT), &[a, g]);
        assert_eq!(tree.children(&inv, b), &[f]);
        assert!(tree.children(&inv, f).is_empty());
        assert_eq!(tree.child(&inv, b, b"f.txt"), Some(f));
        assert_eq!(tree.child(&inv, b, b"f.tx"), None);
    }

    #[test]
    fn a_file_cannot_parent_an_artifact() {
        let mut inv = Inventory::new(ident(1));
        let f = inv
            .register(JOB_ROOT, b"f", ArtifactKind::File, ident(2))
            .unwrap();
        assert_eq!(
            inv.register(f, b"x", ArtifactKind::File, ident(3)),
            Err(InventoryError::ParentNotDir { parent: f })
        );
        assert_eq!(
            inv.register(99, b"x", ArtifactKind::File, ident(3)),
            Err(InventoryError::ParentNotDir { parent: 99 })
        );
    }

    #[test]
    fn a_re_registered_name_supersedes_the_vanished_one() {
        let mut inv = Inventory::new(ident(1));
        let old = inv
            .register(JOB_ROOT, b"f", ArtifactKind::File, ident(2))
            .unwrap();
        let new = inv
            .register(JOB_ROOT, b"f", ArtifactKind::File, ident(3))
            .unwrap();
        assert_ne!(old, new);
        let tree = Tree::new(&inv);
        assert_eq!(tree.children(&inv, JOB_ROOT), &[new]);
        assert_eq!(inv.find_child(JOB_ROOT, b"f"), Some(new));
        assert_eq!(tree.live(), 1);
    }

    #[test]
    fn entries_stay_small() {
        // No per-artifact heap allocation: the name is in the shared arena.
        assert!(std::mem::size_of::<Entry>() <= 96);
    }
}
