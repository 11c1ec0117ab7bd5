//! A segment's name taken by another user. The shm directory (`/dev/shm`) is writable by every
//! user, and a session's name (`mlprof-UID-NAME`) is known in advance: anyone can create it
//! first. Such a file is never removed (root could, and another user's file is not ours to
//! judge); the collector says whose it is and how to go around it, as the preloaded processes
//! refuse it ("it belongs to another user").

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The owner of `path` when it exists and is not `uid` (the link itself, not what it points at).
pub fn foreign_owner(path: &Path, uid: u32) -> Option<u32> {
    let owner = std::fs::symlink_metadata(path).ok()?.uid();
    (owner != uid).then_some(owner)
}

/// What to say when the segment `path` cannot be made: another user's file at its name, or
/// the error `err`. `session` is the attach-mode session, `None` for a launcher's own name.
pub fn create_error(path: &Path, err: &io::Error, uid: u32, session: Option<&str>) -> String {
    match foreign_owner(path, uid) {
        Some(owner) if err.kind() == io::ErrorKind::AlreadyExists => taken_message(path, owner, session),
        _ => format!("cannot create the ring {} ({err})", path.display()),
    }
}

/// The segment `path` is a file of user `owner`; `session` as in [`create_error`].
pub fn taken_message(path: &Path, owner: u32, session: Option<&str>) -> String {
    let around = match session {
        Some(session) => format!(
            "serve another session (--session NAME here and MLPROF_SESSION=NAME for the processes; \
             '{session}' is taken)"
        ),
        None => "run again (a launcher's name is new each run)".into(),
    };
    format!(
        "cannot create the ring {}: it belongs to another user (uid {owner}), who created it first; \
         mlprof never removes another user's file. To go around it, {around}, or set MLPROF_SHM_DIR \
         to a directory only you can write, for the collector and the processes",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TempDir;

    #[test]
    fn another_users_file_at_the_name_is_said_with_what_to_do() {
        let dir = TempDir::new("taken");
        let path = dir.path().join("mlprof-7-default");
        std::fs::write(&path, b"not yours").unwrap();
        // Safety: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let exists = io::Error::from(io::ErrorKind::AlreadyExists);
        assert_eq!(foreign_owner(&path, uid), None, "our own file");
        let ours = create_error(&path, &exists, uid, Some("default"));
        assert!(ours.starts_with("cannot create the ring ") && !ours.contains("another user"), "{ours}");
        // Seen as the user `uid + 1`, the file is another user's.
        let other = uid + 1;
        assert_eq!(foreign_owner(&path, other), Some(uid));
        let said = create_error(&path, &exists, other, Some("default"));
        for part in [
            format!("cannot create the ring {}: it belongs to another user (uid {uid})", path.display()),
            "--session NAME".into(),
            "MLPROF_SESSION=NAME".into(),
            "MLPROF_SHM_DIR".into(),
        ] {
            assert!(said.contains(&part), "{part:?} missing from: {said}");
        }
        let launcher = create_error(&path, &exists, other, None);
        assert!(launcher.contains("run again") && !launcher.contains("--session"), "{launcher}");
        // Another error at a foreign file is said as it is.
        let denied = create_error(&path, &io::Error::from(io::ErrorKind::PermissionDenied), other, None);
        assert!(!denied.contains("another user"), "{denied}");
        assert!(path.exists(), "nothing here removes it");
    }
}
