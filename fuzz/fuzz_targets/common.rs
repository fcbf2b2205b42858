// Shared by the targets: the fuzz input as a file (the readers map files), written to
// one path per process under /dev/shm when it exists (no disk traffic per execution).
use std::path::PathBuf;

pub fn as_file(data: &[u8], ext: &str) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let path = dir.join(format!("tl-fuzz-{}.{ext}", std::process::id()));
    std::fs::write(&path, data).expect("write the fuzz input");
    path
}
