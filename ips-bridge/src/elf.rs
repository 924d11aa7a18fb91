//! The attributes `pkgsend publish` adds to a payload that is an ELF object: `elfarch`,
//! `elfbits`, `elfhash` and the `gelf:` / `gelf.unsigned:` content hashes.
//!
//! pkg hashes an ELF object by its sections rather than its bytes, so that stripping the
//! parts the link editor and tools rewrite freely does not change the hash. In section
//! header order, skipping section 0, every section except `.SUNW_signature`, `.comment`,
//! `.SUNW_dof`, `.debug`, `.plt`, `.rela.bss`, `.rela.plt`, `.line`, `.note` and `.compcom`
//! goes into the hash: its bytes from the file, or, for a section that takes no room in the
//! file (`SHT_NOBITS`, such as `.bss`), its size as 8 big-endian bytes. `elfhash` is the
//! SHA-1 of that stream and `gelf:sha512t_256` its SHA-512/256; `gelf.unsigned:sha512t_256`
//! is the same value (pkg leaves signature sections out of both).
//!
//! `elfarch` names the machine as pkg does (`i386` for x86 in either width, `sparc`, `ppc`,
//! `aarch64`, `none`, else `other`) and `elfbits` the class (32 or 64). Whatever values a
//! source manifest gives are dropped first ([`ElfInfo::strip_from`]), as `pkgsend publish`
//! drops them.

use std::io::{self, Read, Seek, SeekFrom};

use object::elf::{self, FileHeader32, FileHeader64};
use object::read::ReadCache;
use object::read::elf::{FileHeader, SectionHeader};
use object::{Endianness, ReadRef};

use crate::Action;
use crate::payload::HashAlg;

/// Sections pkg leaves out of an ELF object's hash.
const UNHASHED: [&[u8]; 10] = [
    b".SUNW_signature",
    b".comment",
    b".SUNW_dof",
    b".debug",
    b".plt",
    b".rela.bss",
    b".rela.plt",
    b".line",
    b".note",
    b".compcom",
];

/// Why an object that starts with the ELF magic could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    /// Reading the file failed.
    #[error("i/o error")]
    Io(#[from] io::Error),
    /// The headers do not describe a readable ELF object.
    #[error("not a readable ELF object: {0}")]
    Malformed(String),
}

/// What `pkgsend` records about an ELF payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `elfarch`: `i386`, `sparc`, `ppc`, `aarch64`, `none` or `other`.
    pub arch: &'static str,
    /// `elfbits`: 32 or 64.
    pub bits: u8,
    /// `elfhash`: SHA-1 of the hashed sections, hex.
    pub elfhash: String,
    /// SHA-512/256 of the hashed sections, hex (`gelf:sha512t_256` and
    /// `gelf.unsigned:sha512t_256`).
    pub gelf_sha512t_256: String,
}

impl ElfInfo {
    /// Reads `object`: `None` when it does not start with the ELF magic (`\x7fELF`), else its
    /// attributes. Only the headers and the hashed sections are read, in pieces, so memory
    /// stays bounded whatever the object's size.
    pub fn read<R: Read + Seek>(mut object: R) -> Result<Option<ElfInfo>, ElfError> {
        let mut magic = [0u8; 4];
        object.seek(SeekFrom::Start(0))?;
        let mut got = 0;
        while got < 4 {
            match object.read(&mut magic[got..])? {
                0 => return Ok(None),
                n => got += n,
            }
        }
        if magic != elf::ELFMAG {
            return Ok(None);
        }
        let cache = ReadCache::new(object);
        let (arch, bits, sections) = {
            // e_ident[EI_CLASS]
            let class = (&cache)
                .read_bytes_at(4, 1)
                .map_err(|()| ElfError::Malformed("the ELF header is cut short".into()))?;
            match class[0] {
                c if c == elf::ELFCLASS32.0 => layout::<FileHeader32<Endianness>, _>(&cache)?,
                c if c == elf::ELFCLASS64.0 => layout::<FileHeader64<Endianness>, _>(&cache)?,
                other => return Err(ElfError::Malformed(format!("unknown ELF class {other}"))),
            }
        };
        let mut object = cache.into_inner();
        let mut sha1 = HashAlg::Sha1.hasher();
        let mut sha512 = HashAlg::Sha512t256.hasher();
        let mut buf = vec![0u8; 64 * 1024];
        for piece in sections {
            match piece {
                Piece::Size(n) => {
                    sha1.update(&n.to_be_bytes());
                    sha512.update(&n.to_be_bytes());
                }
                Piece::Bytes { offset, mut size } => {
                    object.seek(SeekFrom::Start(offset))?;
                    while size > 0 {
                        let want = buf.len().min(usize::try_from(size).unwrap_or(usize::MAX));
                        let n = object.read(&mut buf[..want])?;
                        if n == 0 {
                            return Err(ElfError::Malformed(format!(
                                "a section at offset {offset} ends past the end of the file"
                            )));
                        }
                        sha1.update(&buf[..n]);
                        sha512.update(&buf[..n]);
                        size -= n as u64;
                    }
                }
            }
        }
        Ok(Some(ElfInfo {
            arch,
            bits,
            elfhash: sha1.finish_hex(),
            gelf_sha512t_256: sha512.finish_hex(),
        }))
    }

    /// Records the attributes on `action` as `pkgsend publish` does: `elfarch`, `elfbits` and
    /// `elfhash` set, the two `gelf` values put before the `pkg.content-hash` values it has.
    pub fn apply_to(&self, action: &mut Action) {
        action.set("elfarch", self.arch);
        action.set("elfbits", &self.bits.to_string());
        action.set("elfhash", &self.elfhash);
        let kept: Vec<String> = action
            .get_all("pkg.content-hash")
            .iter()
            .map(|v| v.to_string())
            .collect();
        action.remove("pkg.content-hash");
        action.push(
            "pkg.content-hash",
            &format!("gelf:sha512t_256:{}", self.gelf_sha512t_256),
        );
        action.push(
            "pkg.content-hash",
            &format!("gelf.unsigned:sha512t_256:{}", self.gelf_sha512t_256),
        );
        for v in kept {
            action.push("pkg.content-hash", &v);
        }
    }

    /// Removes `elfarch`, `elfbits` and `elfhash` from `action`: `pkgsend publish` drops
    /// them from every action with a payload and computes them again from the content.
    pub fn strip_from(action: &mut Action) {
        for key in ["elfarch", "elfbits", "elfhash"] {
            action.remove(key);
        }
    }
}

/// One run of the hashed stream.
enum Piece {
    /// A section's bytes in the file.
    Bytes { offset: u64, size: u64 },
    /// A `SHT_NOBITS` section's size.
    Size(u64),
}

/// The machine name pkg gives an `e_machine` value.
fn arch_name(machine: u16) -> &'static str {
    match machine {
        0 => "none",
        2 | 18 | 43 => "sparc", // EM_SPARC, EM_SPARC32PLUS, EM_SPARCV9
        3 | 6 | 62 => "i386",   // EM_386, EM_486, EM_AMD64 (EM_X86_64)
        20 | 21 => "ppc",       // EM_PPC, EM_PPC64
        183 => "aarch64",       // EM_AARCH64
        _ => "other",
    }
}

/// The machine, the class and the pieces of the hashed stream, from the headers.
fn layout<'d, H: FileHeader<Endian = Endianness>, R: ReadRef<'d>>(
    data: R,
) -> Result<(&'static str, u8, Vec<Piece>), ElfError> {
    let bad = |what: &str, e: object::read::Error| ElfError::Malformed(format!("{what}: {e}"));
    let header = H::parse(data).map_err(|e| bad("the ELF header", e))?;
    let endian = header.endian().map_err(|e| bad("the ELF header", e))?;
    let bits = if header.is_type_64() { 64 } else { 32 };
    let arch = arch_name(header.e_machine(endian).0);
    let table = header
        .sections(endian, data)
        .map_err(|e| bad("the section headers", e))?;
    let mut pieces = Vec::new();
    for (index, section) in table.iter().enumerate().skip(1) {
        let name = table
            .section_name(endian, section)
            .map_err(|e| bad(&format!("the name of section {index}"), e))?;
        if UNHASHED.contains(&name) {
            continue;
        }
        let size: u64 = section.sh_size(endian).into();
        if section.sh_type(endian) == elf::SHT_NOBITS {
            pieces.push(Piece::Size(size));
        } else if size > 0 {
            pieces.push(Piece::Bytes {
                offset: section.sh_offset(endian).into(),
                size,
            });
        }
    }
    Ok((arch, bits, pieces))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    use crate::payload::hash_hex;

    /// Section contents of the objects [`object`] writes.
    const TEXT: &[u8] = b"\x55\x48\x89\xe5\xc3 code";
    const BSS_SIZE: u64 = 0x1234;
    const SHSTRTAB: &[u8] = b"\0.text\0.bss\0.comment\0.shstrtab\0";

    /// A small ELF object: `.text`, `.bss` (no bits), `.comment` and `.shstrtab`, in the
    /// given class and byte order.
    fn object(is_64: bool, big: bool, machine: u16, comment: &[u8]) -> Vec<u8> {
        let (ehsize, shentsize) = if is_64 { (64, 64) } else { (52, 40) };
        let put = |out: &mut Vec<u8>, v: u64, width: usize| {
            let b = v.to_be_bytes();
            let b = &b[8 - width..];
            if big {
                out.extend_from_slice(b);
            } else {
                out.extend(b.iter().rev());
            }
        };
        let word = if is_64 { 8 } else { 4 };
        // Section data right after the header, then the section headers.
        let text_at = ehsize as u64;
        let comment_at = text_at + TEXT.len() as u64;
        let strtab_at = comment_at + comment.len() as u64;
        let shoff = strtab_at + SHSTRTAB.len() as u64;
        let mut out = vec![0x7f, b'E', b'L', b'F', if is_64 { 2 } else { 1 }];
        out.extend([if big { 2 } else { 1 }, 1, 0]);
        out.resize(16, 0);
        put(&mut out, 2, 2); // e_type: executable
        put(&mut out, u64::from(machine), 2);
        put(&mut out, 1, 4); // e_version
        put(&mut out, 0, word); // e_entry
        put(&mut out, 0, word); // e_phoff
        put(&mut out, shoff, word);
        put(&mut out, 0, 4); // e_flags
        put(&mut out, ehsize as u64, 2);
        put(&mut out, 0, 2); // e_phentsize
        put(&mut out, 0, 2); // e_phnum
        put(&mut out, shentsize as u64, 2);
        put(&mut out, 5, 2); // e_shnum
        put(&mut out, 4, 2); // e_shstrndx
        assert_eq!(out.len(), ehsize);
        out.extend_from_slice(TEXT);
        out.extend_from_slice(comment);
        out.extend_from_slice(SHSTRTAB);
        // (name offset, type, offset, size)
        let sections = [
            (0, 0, 0, 0),
            (1, 1, text_at, TEXT.len() as u64),
            (7, 8, 0, BSS_SIZE),
            (12, 1, comment_at, comment.len() as u64),
            (21, 3, strtab_at, SHSTRTAB.len() as u64),
        ];
        for (name, kind, offset, size) in sections {
            put(&mut out, name, 4);
            put(&mut out, kind, 4);
            put(&mut out, 0, word); // sh_flags
            put(&mut out, 0, word); // sh_addr
            put(&mut out, offset, word);
            put(&mut out, size, word);
            put(&mut out, 0, 4); // sh_link
            put(&mut out, 0, 4); // sh_info
            put(&mut out, 1, word); // sh_addralign
            put(&mut out, 0, word); // sh_entsize
        }
        out
    }

    /// What pkg hashes in [`object`]: `.text`, the size of `.bss` and `.shstrtab`.
    fn expected(alg: HashAlg) -> String {
        let mut h = alg.hasher();
        h.update(TEXT);
        h.update(&BSS_SIZE.to_be_bytes());
        h.update(SHSTRTAB);
        h.finish_hex()
    }

    fn read(bytes: Vec<u8>) -> Result<Option<ElfInfo>, ElfError> {
        ElfInfo::read(Cursor::new(bytes))
    }

    #[test]
    fn hashes_the_sections_pkg_hashes_in_every_class_and_byte_order() {
        for (is_64, big, machine, arch, bits) in [
            (true, false, 62, "i386", 64),
            (false, false, 3, "i386", 32),
            (true, true, 43, "sparc", 64),
            (false, true, 2, "sparc", 32),
            (true, false, 183, "aarch64", 64),
            (true, false, 243, "other", 64),
        ] {
            let info = read(object(is_64, big, machine, b"GCC: 14"))
                .unwrap()
                .expect("an ELF object");
            assert_eq!(
                info,
                ElfInfo {
                    arch,
                    bits,
                    elfhash: expected(HashAlg::Sha1),
                    gelf_sha512t_256: expected(HashAlg::Sha512t256),
                },
                "class 64 {is_64}, big-endian {big}, machine {machine}"
            );
        }
        // .comment is left out: another compiler's note keeps the hash.
        let a = read(object(true, false, 62, b"GCC: 14")).unwrap().unwrap();
        let b = read(object(true, false, 62, b"clang 19 wrote this"))
            .unwrap()
            .unwrap();
        assert_eq!(a.elfhash, b.elfhash);
        // The content hash of the whole file differs, the ELF hash of the code does not.
        assert_ne!(
            hash_hex(HashAlg::Sha1, &object(true, false, 62, b"a")),
            hash_hex(HashAlg::Sha1, &object(true, false, 62, b"b"))
        );
    }

    #[test]
    fn other_content_is_none_and_a_broken_object_names_what_is_wrong() {
        assert!(read(b"#!/bin/sh\necho hi\n".to_vec()).unwrap().is_none());
        assert!(read(b"\x7fEL".to_vec()).unwrap().is_none());
        assert!(read(Vec::new()).unwrap().is_none());
        let mut cut = object(true, false, 62, b"GCC");
        cut.truncate(40);
        let e = read(cut).unwrap_err().to_string();
        assert!(e.contains("the ELF header"), "{e}");
        // A section that runs past the end of the file.
        let mut short = object(true, false, 62, b"GCC");
        let text_size_at = 64 + TEXT.len() + 3 + SHSTRTAB.len() + 64 + 32;
        short[text_size_at..text_size_at + 8].copy_from_slice(&1_000_000u64.to_le_bytes());
        let e = read(short).unwrap_err().to_string();
        assert!(e.contains("ends past the end of the file"), "{e}");
        let mut class = object(true, false, 62, b"GCC");
        class[4] = 9;
        let e = read(class).unwrap_err().to_string();
        assert!(e.contains("unknown ELF class 9"), "{e}");
    }

    #[test]
    fn attributes_go_where_pkgsend_puts_them() {
        let mut a = crate::Action::parse(
            "file 0123 path=usr/bin/x owner=root group=bin mode=0555 \
             pkg.content-hash=file:sha512t_256:aa pkg.content-hash=gzip:sha512t_256:bb",
        )
        .unwrap();
        let info = read(object(true, false, 62, b"")).unwrap().unwrap();
        info.apply_to(&mut a);
        assert_eq!(a.get("elfarch"), Some("i386"));
        assert_eq!(a.get("elfbits"), Some("64"));
        assert_eq!(a.get("elfhash"), Some(info.elfhash.as_str()));
        let g = &info.gelf_sha512t_256;
        assert_eq!(
            a.get_all("pkg.content-hash"),
            [
                format!("gelf:sha512t_256:{g}"),
                format!("gelf.unsigned:sha512t_256:{g}"),
                "file:sha512t_256:aa".into(),
                "gzip:sha512t_256:bb".into(),
            ]
        );
        // What a manifest gives is dropped, as pkgsend publish drops it.
        let mut given =
            crate::Action::parse("file path=x elfarch=sparc elfbits=32 elfhash=00 mode=0555")
                .unwrap();
        ElfInfo::strip_from(&mut given);
        assert_eq!(given.to_string(), "file mode=0555 path=x");
    }
}
