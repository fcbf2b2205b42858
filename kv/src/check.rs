//! The invariant check of kv.md, for tests and debugging (O(n_blocks) per call).

use crate::pool::{BlockState, KvPool, NIL};

impl KvPool {
    /// Check every invariant of kv.md and of this pool's bookkeeping; `Err` names the
    /// first one broken. Walks the whole pool, so it is for tests, not the hot path.
    ///
    /// Checked: free + cached + in-use = n_blocks and each count matches the states; each
    /// block's refs match its state; the free list holds exactly the free blocks, once;
    /// the LRU, walked both ways, holds exactly the cached blocks, once; only registered
    /// blocks are cached, and only with prefix caching on; every hash entry names a
    /// block registered under that hash, not free, with fill == B; every registered
    /// block has its entry; no fill exceeds B.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.blocks.len();
        if n != self.n_blocks as usize {
            return Err(format!("{n} block records for n_blocks {}", self.n_blocks));
        }
        if self.free.len() + self.n_cached + self.n_in_use != n {
            return Err(format!(
                "free {} + cached {} + in use {} != n_blocks {n}",
                self.free.len(),
                self.n_cached,
                self.n_in_use
            ));
        }
        let bt = self.geometry.block_tokens;
        let (mut cached, mut in_use) = (0usize, 0usize);
        for (id, b) in self.blocks.iter().enumerate() {
            if b.fill > bt {
                return Err(format!("block {id}: fill {} > block_tokens {bt}", b.fill));
            }
            match b.state {
                BlockState::Free if b.refs != 0 || b.hash.is_some() => {
                    return Err(format!("block {id}: free with refs {} and hash {:?}", b.refs, b.hash))
                }
                BlockState::Cached if b.refs != 0 || b.hash.is_none() || !self.prefix_cache => {
                    return Err(format!(
                        "block {id}: cached with refs {}, hash {:?}, prefix cache {}",
                        b.refs, b.hash, self.prefix_cache
                    ))
                }
                BlockState::InUse if b.refs == 0 => return Err(format!("block {id}: in use with refs 0")),
                BlockState::Cached => cached += 1,
                BlockState::InUse => in_use += 1,
                BlockState::Free => {}
            }
            if let Some(h) = b.hash {
                if self.index.get(&h) != Some(&(id as u32)) {
                    return Err(format!(
                        "block {id}: registered under {h:#x} but the index says {:?}",
                        self.index.get(&h)
                    ));
                }
            }
        }
        if cached != self.n_cached || in_use != self.n_in_use {
            return Err(format!(
                "counted cached {cached}, in use {in_use}; the pool says {} and {}",
                self.n_cached, self.n_in_use
            ));
        }
        let mut seen = vec![false; n];
        for &id in &self.free {
            let b = self.blocks.get(id as usize).ok_or(format!("free list holds bad id {id}"))?;
            if b.state != BlockState::Free || std::mem::replace(&mut seen[id as usize], true) {
                return Err(format!("free list holds block {id} ({:?}) or holds it twice", b.state));
            }
        }
        let (mut walked, mut prev, mut cur) = (0usize, NIL, self.lru_head);
        while cur != NIL {
            let b = self.blocks.get(cur as usize).ok_or(format!("LRU holds bad id {cur}"))?;
            if b.state != BlockState::Cached || std::mem::replace(&mut seen[cur as usize], true) {
                return Err(format!("LRU holds block {cur} ({:?}), twice or also on the free list", b.state));
            }
            if b.prev != prev {
                return Err(format!("LRU block {cur}: prev {} but reached from {prev}", b.prev));
            }
            walked += 1;
            prev = cur;
            cur = b.next;
        }
        if prev != self.lru_tail || walked != self.n_cached {
            return Err(format!(
                "LRU walk: {walked} blocks ending at {prev}; tail {} and {} cached",
                self.lru_tail, self.n_cached
            ));
        }
        for (&h, &id) in &self.index {
            let b = self.blocks.get(id as usize).ok_or(format!("hash {h:#x} names bad id {id}"))?;
            if b.hash != Some(h) || b.state == BlockState::Free || b.fill != bt {
                return Err(format!(
                    "hash {h:#x} names block {id} with hash {:?}, state {:?}, fill {}",
                    b.hash, b.state, b.fill
                ));
            }
        }
        Ok(())
    }
}
