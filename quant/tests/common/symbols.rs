//! Reading a test binary's own function symbols, for the codegen guards of tl-quant and
//! tl-decoder (`tests/codegen.rs` in each; the decoder's includes this file by path).

#![allow(dead_code)] // each test binary uses its own part

/// Function symbols of an ELF64 little-endian file (`.symtab`, else `.dynsym`).
pub fn function_symbols(elf: &[u8]) -> Result<Vec<String>, String> {
    let u16_at = |at: usize| elf.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |at: usize| elf.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |at: usize| elf.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Err("not a little-endian ELF64 file".into());
    }
    let bad = || "truncated ELF header or section table".to_string();
    let (shoff, shentsize, shnum) =
        (u64_at(0x28).ok_or_else(bad)?, u16_at(0x3a).ok_or_else(bad)?, u16_at(0x3c).ok_or_else(bad)?);
    // (type, offset, size, link, entry size) of section i.
    let section = |i: usize| -> Option<(u32, usize, usize, usize, usize)> {
        let h = shoff + i * shentsize as usize;
        Some((u32_at(h + 4)?, u64_at(h + 0x18)?, u64_at(h + 0x20)?, u32_at(h + 0x28)? as usize, u64_at(h + 0x38)?))
    };
    let sections: Vec<_> = (0..shnum as usize).map(section).collect::<Option<_>>().ok_or_else(bad)?;
    const SYMTAB: u32 = 2;
    const DYNSYM: u32 = 11;
    let table = sections
        .iter()
        .find(|s| s.0 == SYMTAB)
        .or_else(|| sections.iter().find(|s| s.0 == DYNSYM))
        .ok_or("no symbol table")?;
    let (_, off, size, link, entsize) = *table;
    let (_, str_off, str_size, _, _) = *sections.get(link).ok_or_else(bad)?;
    let strings = elf.get(str_off..str_off + str_size).ok_or_else(bad)?;
    let mut names = Vec::new();
    for at in (off..off + size).step_by(entsize.max(1)) {
        const FUNC: u8 = 2;
        if elf.get(at + 4).ok_or_else(bad)? & 0xf != FUNC {
            continue;
        }
        let name = u32_at(at).ok_or_else(bad)? as usize;
        let tail = strings.get(name..).ok_or_else(bad)?;
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        names.push(String::from_utf8_lossy(&tail[..end]).into_owned());
    }
    Ok(names)
}

/// Whether a (mangled) symbol is an outlined x86 SIMD intrinsic. `xsave` (`_xgetbv`) and
/// `cpuid` are the standard library's feature detection, run once, not kernel code.
pub fn simd_intrinsic(name: &str) -> bool {
    name.contains("core_arch") && name.contains("x86") && !name.contains("xsave") && !name.contains("cpuid")
}

/// This test executable's function symbols (panics with the path and the reason when they
/// cannot be read).
pub fn own_function_symbols() -> Vec<String> {
    let exe = std::env::current_exe().expect("the test's own path");
    let elf = std::fs::read(&exe).unwrap_or_else(|e| panic!("reading {}: {e}", exe.display()));
    function_symbols(&elf).unwrap_or_else(|e| panic!("{}: {e}", exe.display()))
}

/// Asserts that this test executable holds `krate`'s AVX-512 kernels (so the symbol table
/// read is this binary's) and no out-of-line SIMD intrinsic.
pub fn assert_no_outlined_intrinsics(krate: &str) {
    let names = own_function_symbols();
    assert!(
        names.iter().any(|n| n.contains(krate) && n.to_ascii_lowercase().contains("avx512")),
        "no {krate} AVX-512 kernel among {} functions: the symbol table is not this binary's",
        names.len()
    );
    let outlined: Vec<&String> = names.iter().filter(|n| simd_intrinsic(n)).collect();
    assert!(
        outlined.is_empty(),
        "{} SIMD intrinsics compiled as functions of their own (called out of line from code \
         compiled without the instruction set; look for a closure in the kernels): {outlined:#?}",
        outlined.len()
    );
}
