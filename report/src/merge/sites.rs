//! Call sites in a merged run (`--sites` on the nodes): each node numbers its sites from 1, so
//! the merge gives every distinct site one id of its own, the same line (or native caller) met
//! on several nodes being one site, as the collector does for the processes of one node; each
//! node's event sites are renumbered beside its events.

use std::collections::HashMap;

use mlprof_format::ids::Ids;
use mlprof_format::site::SiteInfo;

/// What makes a site the same on two nodes: file, function, line, native caller's address in
/// its module, and the (merged) id of its caller's site.
type Content = (u64, u64, u32, Option<u64>, u32);

/// The merged run's sites.
#[derive(Default)]
pub(super) struct MergedSites {
    by_content: Ids<Content>,
}

/// One node's site ids → the merged run's.
#[derive(Default)]
pub(super) struct NodeSites {
    ids: HashMap<u32, u32>,
}

impl MergedSites {
    /// Node `node`'s site `site`: its merged id noted; the site to write when the merged run
    /// has not got it yet.
    pub(super) fn add(&mut self, node: &mut NodeSites, site: SiteInfo) -> Option<SiteInfo> {
        let parent = node.id(site.parent);
        let key = (site.file, site.function, site.line, site.native.then_some(site.address), parent);
        let (id, new) = self.by_content.id(key);
        node.ids.insert(site.id, id);
        new.then_some(SiteInfo { id, parent, ..site })
    }
}

impl NodeSites {
    /// The merged id of this node's site `id` (0: none, or one the node never defined).
    pub(super) fn id(&self, id: u32) -> u32 {
        if id == 0 { 0 } else { self.ids.get(&id).copied().unwrap_or(0) }
    }

    /// An event sites frame of this node, renumbered.
    pub(super) fn renumber(&self, sites: &[u32]) -> Vec<u32> {
        sites.iter().map(|&id| self.id(id)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(id: u32, line: u32, parent: u32) -> SiteInfo {
        SiteInfo { id, file: 1, function: 2, line, parent, ..SiteInfo::default() }
    }

    /// Two nodes ran the same two lines (the second called from the first), numbered
    /// differently; a third line only on node b is a new site.
    #[test]
    fn the_same_line_on_two_nodes_is_one_site() {
        let mut merged = MergedSites::default();
        let (mut a, mut b) = (NodeSites::default(), NodeSites::default());
        assert_eq!(merged.add(&mut a, site(1, 10, 0)), Some(site(1, 10, 0)));
        assert_eq!(merged.add(&mut a, site(2, 20, 1)), Some(site(2, 20, 1)));
        assert_eq!(merged.add(&mut b, site(7, 30, 0)), Some(site(3, 30, 0)));
        assert_eq!(merged.add(&mut b, site(8, 10, 0)), None);
        assert_eq!(merged.add(&mut b, site(9, 20, 8)), None);
        assert_eq!(b.renumber(&[0, 7, 8, 9, 4]), [0, 3, 1, 2, 0]);
        assert_eq!(a.renumber(&[2, 1]), [2, 1]);
    }
}
