//! `Path::choose`: a process runs the path it chose (bench --path measures each path), and
//! a second, different choice after the first is refused rather than silently ignored.

use tl_quant::Path;

#[test]
fn the_chosen_path_is_the_one_every_kernel_runs_and_a_later_other_choice_is_refused() {
    Path::Portable.choose().unwrap();
    assert_eq!(Path::best(), Path::Portable);
    // Choosing it again is fine; another one is not.
    Path::Portable.choose().unwrap();
    if Path::Avx2.available() {
        let e = Path::Avx2.choose().unwrap_err();
        assert!(e.contains("Portable path is already in use"), "{e}");
    }
    assert_eq!(Path::best(), Path::Portable);
}
