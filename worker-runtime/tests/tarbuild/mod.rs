//! A raw tar writer for tests: it writes whatever it is told, including the malformed and
//! hostile entries the `tar` crate's builder refuses to produce (`..` names, absolute names,
//! mismatched PAX sizes, bad checksums).

#![allow(dead_code)]

/// Header fields; defaults are a regular file, mode 0644, owner 0:0, mtime 1.
#[derive(Clone)]
pub struct H {
    pub name: Vec<u8>,
    pub typeflag: u8,
    pub size: u64,
    pub link: Vec<u8>,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
    pub dev_major: u64,
    pub dev_minor: u64,
    /// Written into the size field instead of `size` when set (data length stays `size`).
    pub size_field: Option<u64>,
    /// Corrupts the checksum.
    pub bad_checksum: bool,
}

impl H {
    pub fn new(name: &[u8], typeflag: u8) -> H {
        H {
            name: name.to_vec(),
            typeflag,
            size: 0,
            link: Vec::new(),
            mode: if typeflag == b'5' { 0o755 } else { 0o644 },
            uid: 0,
            gid: 0,
            mtime: 1,
            dev_major: 0,
            dev_minor: 0,
            size_field: None,
            bad_checksum: false,
        }
    }
}

fn number(field: &mut [u8], v: u64) {
    let width = field.len() - 1;
    let s = format!("{v:0width$o}");
    if s.len() <= width {
        field[..width].copy_from_slice(s.as_bytes());
        field[width] = 0;
    } else {
        // base-256: high bit set, big-endian value.
        field.fill(0);
        field[0] = 0x80;
        let bytes = v.to_be_bytes();
        let n = field.len();
        field[n - 8..].copy_from_slice(&bytes);
        field[0] |= 0x80;
    }
}

pub fn header(h: &H) -> [u8; 512] {
    let mut b = [0u8; 512];
    assert!(h.name.len() <= 100, "use pax for long names");
    b[..h.name.len()].copy_from_slice(&h.name);
    number(&mut b[100..108], u64::from(h.mode));
    number(&mut b[108..116], h.uid);
    number(&mut b[116..124], h.gid);
    number(&mut b[124..136], h.size_field.unwrap_or(h.size));
    number(&mut b[136..148], h.mtime);
    b[156] = h.typeflag;
    assert!(h.link.len() <= 100, "use pax for long links");
    b[157..157 + h.link.len()].copy_from_slice(&h.link);
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    number(&mut b[329..337], h.dev_major);
    number(&mut b[337..345], h.dev_minor);
    b[148..156].fill(b' ');
    let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
    let sum = if h.bad_checksum { sum + 1 } else { sum };
    let s = format!("{sum:06o}\0 ");
    b[148..156].copy_from_slice(s.as_bytes());
    b
}

fn pad(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(512) {
        v.push(0);
    }
}

pub fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body_len = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = body_len + 1;
    loop {
        let total = body_len + len.to_string().len();
        if total == len {
            break;
        }
        len = total;
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// A tar stream under construction.
#[derive(Default, Clone)]
pub struct Tar {
    pub buf: Vec<u8>,
}

impl Tar {
    pub fn new() -> Tar {
        Tar::default()
    }

    /// An entry with its data (data.len() bytes follow whatever the header says).
    pub fn entry(mut self, h: H, data: &[u8]) -> Tar {
        self.buf.extend_from_slice(&header(&h));
        self.buf.extend_from_slice(data);
        pad(&mut self.buf);
        self
    }

    /// A PAX extended header (`x`, or `g` for global).
    pub fn pax(self, typeflag: u8, records: &[(&str, &[u8])]) -> Tar {
        let mut body = Vec::new();
        for (k, v) in records {
            body.extend_from_slice(&pax_record(k, v));
        }
        let mut h = H::new(b"PaxHeader", typeflag);
        h.size = body.len() as u64;
        self.entry(h, &body)
    }

    /// A GNU long name record (`L`).
    pub fn gnu_long_name(mut self, name: &[u8]) -> Tar {
        let mut data = name.to_vec();
        data.push(0);
        let mut h = H::new(b"././@LongLink", b'L');
        h.size = data.len() as u64;
        self.buf.extend_from_slice(&header(&h));
        self.buf.extend_from_slice(&data);
        pad(&mut self.buf);
        self
    }

    pub fn file(self, name: &str, data: &[u8]) -> Tar {
        self.file_b(name.as_bytes(), data)
    }

    pub fn file_b(self, name: &[u8], data: &[u8]) -> Tar {
        let mut h = H::new(name, b'0');
        h.size = data.len() as u64;
        self.entry(h, data)
    }

    /// A file whose name may be longer than 100 bytes (PAX path).
    pub fn file_long(self, name: &[u8], data: &[u8]) -> Tar {
        let t = self.pax(b'x', &[("path", name)]);
        let mut h = H::new(b"placeholder", b'0');
        h.size = data.len() as u64;
        t.entry(h, data)
    }

    pub fn dir(self, name: &str) -> Tar {
        self.entry(H::new(name.as_bytes(), b'5'), &[])
    }

    pub fn dir_mode(self, name: &str, mode: u32) -> Tar {
        let mut h = H::new(name.as_bytes(), b'5');
        h.mode = mode;
        self.entry(h, &[])
    }

    pub fn symlink(self, name: &str, target: &str) -> Tar {
        let t = if target.len() > 100 {
            self.pax(b'x', &[("linkpath", target.as_bytes())])
        } else {
            self
        };
        let mut h = H::new(name.as_bytes(), b'2');
        if target.len() <= 100 {
            h.link = target.as_bytes().to_vec();
        }
        h.mode = 0o777;
        t.entry(h, &[])
    }

    pub fn hardlink(self, name: &str, target: &str) -> Tar {
        let mut h = H::new(name.as_bytes(), b'1');
        h.link = target.as_bytes().to_vec();
        self.entry(h, &[])
    }

    pub fn whiteout(self, name: &str) -> Tar {
        self.file(name, b"")
    }

    /// Adds the two end blocks.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&[0u8; 1024]);
        self.buf
    }

    /// The stream without end blocks.
    pub fn unfinished(self) -> Vec<u8> {
        self.buf
    }
}
