//! Image configs: rootfs and DiffIDs against the layer count, history, the runtime config
//! (`StopSignal`, `WorkingDir`, `User`, environment, ports) and the illumos-specific checks.

use serde_json::{Map, Value};

use super::*;

impl Ctx<'_> {
    pub(super) fn config(
        &self,
        v: &Value,
        layer_count: Option<usize>,
        r: &mut Report,
    ) -> Option<ImageConfig> {
        let o = self.object(v, "$", r)?;
        let platform = self.platform(o, "$", r);
        if let Some(c) = self.opt_str(o, "$", "created", r)
            && !is_rfc3339(c)
        {
            r.error(
                Rule::Created,
                self.at("$.created"),
                format!("{c:?} is not an RFC 3339 date-time"),
            );
        }
        let mut diff_ids = Vec::new();
        match o.get("rootfs") {
            Some(Value::Object(rootfs)) => {
                match rootfs.get("type") {
                    Some(Value::String(t)) if t == "layers" => {}
                    Some(t) => r.error(
                        Rule::RootfsType,
                        self.at("$.rootfs.type"),
                        format!("must be \"layers\", found {t}"),
                    ),
                    None => r.error(
                        Rule::RootfsType,
                        self.at("$.rootfs.type"),
                        "is required and must be \"layers\"",
                    ),
                }
                match rootfs.get("diff_ids") {
                    Some(Value::Array(ids)) => {
                        for (i, id) in ids.iter().enumerate() {
                            let p = item("$.rootfs.diff_ids", i);
                            match id {
                                Value::String(s) => {
                                    if let Some(d) = self.digest(s, &p, r) {
                                        diff_ids.push(d);
                                    }
                                }
                                other => r.error(
                                    Rule::Digest,
                                    self.at(&p),
                                    format!("must be a digest string, found {}", json_type(other)),
                                ),
                            }
                        }
                        if let Some(n) = layer_count
                            && n != ids.len()
                        {
                            r.error(
                                Rule::DiffIdsCount,
                                self.at("$.rootfs.diff_ids"),
                                format!("{} diff_ids for {n} layers", ids.len()),
                            );
                        }
                    }
                    Some(other) => r.error(
                        Rule::Required,
                        self.at("$.rootfs.diff_ids"),
                        format!("must be an array, found {}", json_type(other)),
                    ),
                    None => r.error(Rule::Required, self.at("$.rootfs.diff_ids"), "is required"),
                }
            }
            Some(other) => r.error(
                Rule::Required,
                self.at("$.rootfs"),
                format!("must be an object, found {}", json_type(other)),
            ),
            None => r.error(Rule::Required, self.at("$.rootfs"), "is required"),
        }
        if let Some(Value::Array(history)) = o.get("history")
            && let Some(n) = layer_count
        {
            let non_empty = history
                .iter()
                .filter(|h| h.get("empty_layer").and_then(Value::as_bool) != Some(true))
                .count();
            if !history.is_empty() && non_empty != n {
                r.warn(
                    Rule::History,
                    self.at("$.history"),
                    format!("{non_empty} history entries with layers for {n} layers"),
                );
            }
        }
        let stop_signal = match o.get("config") {
            None | Some(Value::Null) => None,
            Some(c) => self
                .object(c, "$.config", r)
                .and_then(|c| self.runtime_config(c, r)),
        };
        if !r.is_ok() {
            return None;
        }
        let oci = match serde_json::from_value::<oci_spec::image::ImageConfiguration>(v.clone()) {
            Ok(c) => c,
            Err(e) => {
                r.error(
                    Rule::Required,
                    self.at("$"),
                    format!("config does not read as an OCI image config: {e}"),
                );
                return None;
            }
        };
        Some(ImageConfig {
            platform: platform?,
            diff_ids,
            stop_signal,
            oci,
        })
    }

    /// The `config` member of an image config: what a runtime acts on. Returns `StopSignal`.
    pub(super) fn runtime_config(&self, c: &Map<String, Value>, r: &mut Report) -> Option<String> {
        let p = "$.config";
        if let Some(user) = self.opt_str(c, p, "User", r) {
            check_user(user).unwrap_or_else(|m| r.error(Rule::User, self.at("$.config.User"), m));
        }
        if let Some(env) = self.opt_str_array(c, p, "Env", Rule::Env, r) {
            for (i, e) in env.iter().enumerate() {
                if e.contains('\0') {
                    r.error(
                        Rule::Env,
                        self.at(&item("$.config.Env", i)),
                        "contains a NUL byte",
                    );
                } else if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
                    r.error(
                        Rule::Env,
                        self.at(&item("$.config.Env", i)),
                        format!("{e:?} is not NAME=value"),
                    );
                }
            }
        }
        let entrypoint = self.opt_str_array(c, p, "Entrypoint", Rule::Required, r);
        let cmd = self.opt_str_array(c, p, "Cmd", Rule::Required, r);
        if entrypoint.as_ref().is_none_or(Vec::is_empty) && cmd.as_ref().is_none_or(Vec::is_empty) {
            r.warn(
                Rule::NothingToRun,
                self.at(p),
                "neither Entrypoint nor Cmd is set: a zone from this image has nothing to start",
            );
        }
        if let Some(wd) = self.opt_str(c, p, "WorkingDir", r) {
            check_working_dir(wd)
                .unwrap_or_else(|m| r.error(Rule::WorkingDir, self.at("$.config.WorkingDir"), m));
        }
        for key in ["Labels"] {
            if let Some(v) = c.get(key).filter(|v| !v.is_null()) {
                match v.as_object() {
                    Some(m) => {
                        for (k, lv) in m {
                            if !lv.is_string() {
                                r.error(
                                    Rule::Required,
                                    self.at(&format!("$.config.{key}.{k}")),
                                    "label values must be strings",
                                );
                            }
                        }
                    }
                    None => r.error(
                        Rule::Required,
                        self.at(&format!("$.config.{key}")),
                        "must be an object",
                    ),
                }
            }
        }
        for key in ["ExposedPorts", "Volumes"] {
            if let Some(v) = c.get(key).filter(|v| !v.is_null())
                && !v.is_object()
            {
                r.error(
                    Rule::Required,
                    self.at(&format!("$.config.{key}")),
                    format!("must be an object, found {}", json_type(v)),
                );
            }
        }
        let sig = self.opt_str(c, p, "StopSignal", r)?;
        match check_stop_signal(sig) {
            Ok(()) => Some(sig.to_owned()),
            Err(m) => {
                r.error(Rule::StopSignal, self.at("$.config.StopSignal"), m);
                None
            }
        }
    }
}

/// Signal names illumos knows (`signal.h`), without the `SIG` prefix.
const ILLUMOS_SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "IOT", "EMT", "FPE", "KILL", "BUS", "SEGV", "SYS",
    "PIPE", "ALRM", "TERM", "USR1", "USR2", "CLD", "CHLD", "PWR", "WINCH", "URG", "POLL", "IO",
    "STOP", "TSTP", "CONT", "TTIN", "TTOU", "VTALRM", "PROF", "XCPU", "XFSZ", "WAITING", "LWP",
    "FREEZE", "THAW", "CANCEL", "LOST", "XRES", "JVM1", "JVM2", "INFO", "RTMIN", "RTMAX",
];

/// `StopSignal` must be a name: signal numbers differ between illumos and Linux (SIGUSR1 is 16
/// on illumos, 10 on Linux), so a number written on one means another signal on the other.
pub fn check_stop_signal(sig: &str) -> Result<(), String> {
    if sig.bytes().all(|b| b.is_ascii_digit()) && !sig.is_empty() {
        return Err(format!(
            "{sig:?} is a signal number; use a name such as SIGTERM (numbers differ between illumos and Linux)"
        ));
    }
    let name = sig.strip_prefix("SIG").unwrap_or(sig);
    let base = name.split_once(['+', '-']).map_or(name, |(b, off)| {
        if off.bytes().all(|c| c.is_ascii_digit()) && !off.is_empty() {
            b
        } else {
            ""
        }
    });
    let realtime_offset_ok = base == name || base == "RTMIN" || base == "RTMAX";
    if ILLUMOS_SIGNALS.contains(&base) && realtime_offset_ok {
        Ok(())
    } else {
        Err(format!("{sig:?} is not an illumos signal name"))
    }
}

/// `WorkingDir` must be absolute and must not climb or point into `/proc` (CVE-2024-21626
/// used `/proc/self/fd/N`).
pub fn check_working_dir(wd: &str) -> Result<(), String> {
    if wd.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if !wd.starts_with('/') {
        return Err(format!("{wd:?} is not absolute"));
    }
    if wd.split('/').any(|c| c == "..") {
        return Err(format!("{wd:?} contains '..'"));
    }
    let clean: Vec<&str> = wd
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if clean.first() == Some(&"proc") {
        return Err(format!("{wd:?} is inside /proc"));
    }
    Ok(())
}

/// `User` is `user[:group]`, each a name or a numeric id below 2^31 (CVE-2024-40635: larger ids
/// wrapped to 0 and ran as root).
pub fn check_user(user: &str) -> Result<(), String> {
    if user.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    let mut parts = user.splitn(3, ':');
    let (u, g) = (parts.next().unwrap_or(""), parts.next());
    if parts.next().is_some() {
        return Err(format!("{user:?} has more than one ':'"));
    }
    for (what, part) in [("user", Some(u)), ("group", g)] {
        let Some(part) = part else { continue };
        if part.is_empty() {
            return Err(format!("{user:?} has an empty {what}"));
        }
        if part.bytes().all(|b| b.is_ascii_digit()) {
            match part.parse::<u64>() {
                Ok(id) if id < (1 << 31) => {}
                _ => return Err(format!("{what} id {part} is not below 2^31")),
            }
        } else if part.starts_with('-') {
            return Err(format!("{what} id {part} is negative"));
        }
    }
    Ok(())
}

/// RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
pub(super) fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| x.iter().all(u8::is_ascii_digit))
    };
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(99);
    if b.len() < 20
        || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10))
    {
        return false;
    }
    let time_ok = matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !time_ok {
        return false;
    }
    let (month, day, hour, min, sec) =
        (num(5..7), num(8..10), num(11..13), num(14..16), num(17..19));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}
