//! The intercepted functions. Ids are stable: new functions get new ids, old ids are never
//! reused (readers name unknown ids `func#N` and skip them in per-function tables).

/// What a function does, for grouping in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    Open,
    Read,
    Write,
    Close,
    Seek,
    Sync,
    Map,
    Clock,
    Ioctl,
}

macro_rules! funcs {
    ($( $variant:ident = $id:literal, $name:literal, $class:ident; )*) => {
        /// An intercepted function; the discriminant is the `kind` of its event records.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Func { $( $variant = $id, )* }

        impl Func {
            /// Every function, in id order.
            pub const ALL: &[Func] = &[ $( Func::$variant, )* ];

            pub const fn from_id(id: u16) -> Option<Func> {
                match id { $( $id => Some(Func::$variant), )* _ => None }
            }

            /// The symbol the application called.
            pub const fn name(self) -> &'static str {
                match self { $( Func::$variant => $name, )* }
            }

            pub const fn class(self) -> Class {
                match self { $( Func::$variant => Class::$class, )* }
            }
        }
    };
}

funcs! {
    Open = 1, "open", Open;
    Open64 = 2, "open64", Open;
    Openat = 3, "openat", Open;
    Openat64 = 4, "openat64", Open;
    Creat = 5, "creat", Open;
    Fopen = 6, "fopen", Open;
    Fopen64 = 7, "fopen64", Open;
    Read = 10, "read", Read;
    Pread = 11, "pread", Read;
    Pread64 = 12, "pread64", Read;
    Readv = 13, "readv", Read;
    Preadv = 14, "preadv", Read;
    Fread = 15, "fread", Read;
    Write = 20, "write", Write;
    Pwrite = 21, "pwrite", Write;
    Pwrite64 = 22, "pwrite64", Write;
    Writev = 23, "writev", Write;
    Pwritev = 24, "pwritev", Write;
    Fwrite = 25, "fwrite", Write;
    Close = 30, "close", Close;
    Fclose = 31, "fclose", Close;
    Lseek = 40, "lseek", Seek;
    Lseek64 = 41, "lseek64", Seek;
    Fsync = 50, "fsync", Sync;
    Fdatasync = 51, "fdatasync", Sync;
    Mmap = 60, "mmap", Map;
    Mmap64 = 61, "mmap64", Map;
    Munmap = 62, "munmap", Map;
    ClockGettime = 70, "clock_gettime", Clock;
    Gettimeofday = 71, "gettimeofday", Clock;
    Ioctl = 80, "ioctl", Ioctl;
}

impl Func {
    /// Whether the call transfers bytes (its `arg`/`arg2` are bytes asked/done).
    pub const fn moves_bytes(self) -> bool {
        matches!(self.class(), Class::Read | Class::Write)
    }

    /// Whether `arg2` holds an interned path id.
    pub const fn has_path(self) -> bool {
        matches!(self.class(), Class::Open)
    }

    pub fn from_name(name: &str) -> Option<Func> {
        Func::ALL.iter().copied().find(|f| f.name() == name)
    }
}

/// Aggregate slot for `gettimeofday` in a lane's aggregate table; clock ids 0..=11 use their own
/// id as slot, any other clock id uses [`AGG_SLOT_OTHER_CLOCK`].
pub const AGG_SLOT_GETTIMEOFDAY: usize = 13;
pub const AGG_SLOT_OTHER_CLOCK: usize = 12;
/// Number of aggregate slots per lane.
pub const AGG_SLOTS: usize = 16;

/// The function and clock id an aggregate slot stands for.
pub fn agg_slot_meaning(slot: usize) -> Option<(Func, Option<i32>)> {
    match slot {
        0..=11 => Some((Func::ClockGettime, Some(slot as i32))),
        AGG_SLOT_OTHER_CLOCK => Some((Func::ClockGettime, None)),
        AGG_SLOT_GETTIMEOFDAY => Some((Func::Gettimeofday, None)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_names_are_unique() {
        let mut names = std::collections::HashSet::new();
        for &f in Func::ALL {
            assert_eq!(Func::from_id(f as u16), Some(f));
            assert!(names.insert(f.name()));
            assert_eq!(Func::from_name(f.name()), Some(f));
        }
        assert_eq!(Func::from_id(0), None);
        assert_eq!(Func::from_id(9999), None);
    }
}
