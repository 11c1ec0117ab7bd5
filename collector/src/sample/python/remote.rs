//! Another process's memory for the frame walk: `process_vm_readv` a page at a time, the pages
//! kept until [`Remote::forget`] (the sampler forgets them before each sample: frames change,
//! and a page read for one sample must not answer for the next). A walk touches a handful of
//! pages (the thread state, the interpreter's frame stack, a code object a frame) but reads
//! dozens of words in them, so one system call a page instead of one a word.

use mlprof_pyframes::memory::{Memory, read_process};

const PAGE: usize = 4096;
/// Pages kept at once: a deep stack's walk meets ~20 code objects and a few stack pages.
const KEPT: usize = 48;

pub(crate) struct Remote {
    pid: libc::pid_t,
    /// (page address, its bytes), in the order they were read; a page that could not be read
    /// whole is not kept (its readable part is read word by word).
    pages: Vec<(usize, Box<[u8; PAGE]>)>,
    /// Buffers of pages forgotten, for the next reads (no allocation, no fresh memory a sample).
    spare: Vec<Box<[u8; PAGE]>>,
    /// System calls made, for the sampler's statistics.
    pub(crate) reads: u64,
}

impl Remote {
    pub(crate) fn new(pid: u32) -> Remote {
        Remote { pid: pid as libc::pid_t, pages: Vec::with_capacity(KEPT), spare: Vec::new(), reads: 0 }
    }

    /// Drops what was read: the next reads see the process as it is then.
    pub(crate) fn forget(&mut self) {
        self.spare.extend(self.pages.drain(..).map(|(_, bytes)| bytes));
    }

    fn page(&mut self, at: usize) -> Option<&[u8; PAGE]> {
        let index = match self.pages.iter().position(|(start, _)| *start == at) {
            Some(index) => index,
            None => {
                let mut bytes = self.spare.pop().unwrap_or_else(|| Box::new([0u8; PAGE]));
                self.reads += 1;
                if read_process(self.pid, at, &mut bytes[..]).is_none() {
                    self.spare.push(bytes);
                    return None;
                }
                if self.pages.len() == KEPT {
                    let (_, oldest) = self.pages.remove(0);
                    self.spare.push(oldest);
                }
                self.pages.push((at, bytes));
                self.pages.len() - 1
            }
        };
        self.pages.get(index).map(|(_, bytes)| &**bytes)
    }
}

/// [`Memory`] over a [`Remote`] behind a `RefCell`: the walk's reader takes `&self`.
pub(crate) struct Reader<'a>(pub(crate) &'a std::cell::RefCell<Remote>);

impl Memory for Reader<'_> {
    fn read(&self, addr: usize, buf: &mut [u8]) -> Option<()> {
        let mut remote = self.0.borrow_mut();
        let mut done = 0;
        while done < buf.len() {
            let at = addr.checked_add(done)?;
            let page = at & !(PAGE - 1);
            let within = at - page;
            let take = (PAGE - within).min(buf.len() - done);
            match remote.page(page) {
                Some(bytes) => {
                    buf.get_mut(done..done + take)?.copy_from_slice(bytes.get(within..within + take)?)
                }
                // A page not readable whole (the end of a mapping): the bytes asked for only.
                None => {
                    remote.reads += 1;
                    read_process(remote.pid, at, buf.get_mut(done..done + take)?)?;
                }
            }
            done += take;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads of this process's own memory across a page boundary come back as the bytes are,
    /// from two page reads however many words are read; forgetting reads again.
    #[test]
    fn words_across_pages_from_one_read_a_page() {
        let data: Vec<u64> = (0..2048).collect();
        let remote = std::cell::RefCell::new(Remote::new(std::process::id()));
        let reader = Reader(&remote);
        let base = data.as_ptr() as usize;
        let boundary = (base + PAGE) & !(PAGE - 1);
        let first = (boundary - base) / 8 - 1;
        for i in first..first + 4 {
            assert_eq!(reader.u64(base + i * 8), Some(i as u64));
        }
        let mut pair = [0u8; 16];
        reader.read(base + first * 8, &mut pair).unwrap();
        assert_eq!(pair[..8], (first as u64).to_ne_bytes());
        assert_eq!(pair[8..], (first as u64 + 1).to_ne_bytes());
        assert_eq!(remote.borrow().reads, 2);
        remote.borrow_mut().forget();
        assert_eq!(reader.u64(base + first * 8), Some(first as u64));
        assert_eq!(remote.borrow().reads, 3);
        assert_eq!(reader.u64(8), None, "an unmapped address is an error, not a fault");
    }
}
