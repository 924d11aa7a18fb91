//! Publishing into a file repository: payloads compressed and stored by SHA-1, the manifest
//! written, the catalog updated under the publisher's advisory lock, and catalog rebuilds.

use super::*;

impl FileRepo {
    /// Publishes a package: payloads of `file` and `license` actions are read from `proto`
    /// (the positional hash, when it is not a SHA-1, names the source path; otherwise a
    /// file's `path` does), compressed and stored by SHA-1; hashes and sizes are recorded on
    /// the actions; the manifest is stored and the catalog updated. Payloads already in the
    /// repository need no proto file. The FMRI comes from `set name=pkg.fmri`; it gets
    /// `publisher` and, when it has none, the current time as its timestamp.
    pub fn publish(
        &self,
        publisher: &str,
        manifest: &Manifest,
        proto: Option<&Path>,
    ) -> Result<Fmri, RepoError> {
        self.publish_at(publisher, manifest, proto, SystemTime::now())
    }

    /// [`FileRepo::publish`] with a given publication time (for reproducible repositories).
    pub fn publish_at(
        &self,
        publisher: &str,
        manifest: &Manifest,
        proto: Option<&Path>,
        now: SystemTime,
    ) -> Result<Fmri, RepoError> {
        let publish_err = |what: &str, message: String| RepoError::Publish {
            what: what.to_owned(),
            message,
        };
        if !valid_publisher(publisher) {
            return Err(publish_err(publisher, "invalid publisher name".into()));
        }
        // pkg validates every action at publication; pkglint's duplicate checks come on top
        // (the same rules as `rdctl ips lint`, see `Manifest::check`).
        let errors: Vec<String> = manifest
            .check()
            .into_iter()
            .filter(|f| f.is_error())
            .map(|f| f.to_string())
            .collect();
        if !errors.is_empty() {
            let what = match manifest.fmri() {
                Some(Ok(f)) => f.to_string(),
                _ => "manifest".to_owned(),
            };
            return Err(publish_err(&what, errors.join("; ")));
        }
        let fmri = manifest
            .fmri()
            .ok_or_else(|| publish_err("manifest", "no set name=pkg.fmri action".into()))??;
        let what = fmri.to_string();
        let version = fmri
            .version()
            .ok_or_else(|| publish_err(&what, "pkg.fmri has no version".into()))?;
        let version = if version.timestamp().is_some() {
            version.clone()
        } else {
            let stamp = catalog_time(now);
            let stamp = format!("{}Z", &stamp[..15]);
            let t: Timestamp = stamp.parse().expect("catalog_time is valid");
            Version::parse(&format!("{version}:{t}")).expect("valid version plus timestamp")
        };
        let fmri = Fmri::new(Some(publisher), fmri.stem(), Some(version))?;
        let pub_dir = self.root.join("publisher").join(publisher);
        let _lock = lock_publisher(&pub_dir)?;

        let mut out = Manifest::new();
        for a in manifest.actions() {
            let mut a = a.clone();
            if a.kind() == ActionKind::Set && a.get("name") == Some("pkg.fmri") {
                a.set("value", &fmri.to_string());
            }
            if matches!(a.kind(), ActionKind::File | ActionKind::License) {
                self.store_payload(publisher, &fmri, &mut a, proto)?;
            }
            out.actions_mut().push(a);
        }
        let text = out.to_string();
        let path = pub_dir
            .join("pkg")
            .join(fmri.dir_path().expect("versioned"));
        write_atomic(&path, text.as_bytes())?;

        self.catalog_package(publisher, &fmri, &out, text.as_bytes(), now)?;
        Ok(fmri)
    }

    /// Adds a published package to `publisher`'s catalog (under the publisher's lock): the
    /// parts, this hour's update log and `catalog.attrs`, each written whole.
    fn catalog_package(
        &self,
        publisher: &str,
        fmri: &Fmri,
        manifest: &Manifest,
        manifest_text: &[u8],
        now: SystemTime,
    ) -> Result<(), RepoError> {
        let cat_err = |source| RepoError::Catalog {
            publisher: publisher.to_owned(),
            source,
        };
        let previous = self.catalog_attrs(publisher)?;
        let mut catalog = self.catalog(publisher)?;
        let version = fmri.version().expect("versioned");
        let replaced = catalog.entries_of(publisher, fmri.stem(), version);
        catalog
            .add(fmri, manifest, manifest_text)
            .map_err(cat_err)?;
        let added = catalog.entries_of(publisher, fmri.stem(), version);
        let op_time = catalog_time(now);
        let catalog_dir = self.root.join("publisher").join(publisher).join("catalog");
        // Record the change in this hour's update log, as pkg's server does, so clients
        // holding the catalog refresh it incrementally.
        let name = update_log_name(&op_time, "C");
        let path = catalog_dir.join(&name);
        let mut updates = previous
            .as_ref()
            .map(|p| p.updates.clone())
            .unwrap_or_default();
        let mut log = if updates.contains_key(&name) && path.is_file() {
            UpdateLog::parse(&name, &read_limited(&path)?).map_err(cat_err)?
        } else {
            UpdateLog::new(&name)
        };
        let (stem, v) = (fmri.stem(), version.to_string());
        if !replaced.is_empty() {
            log.record(
                publisher,
                stem,
                &v,
                UpdateOp::Remove,
                &op_time,
                replaced.clone(),
            );
        }
        log.record(publisher, stem, &v, UpdateOp::Add, &op_time, added.clone());
        let (log_text, sig) = log.to_file();
        updates.insert(
            name,
            PartInfo {
                last_modified: op_time.clone(),
                signature_sha1: Some(sig),
            },
        );
        // The log first: attrs, written last, names it.
        write_atomic(&path, log_text.as_bytes())?;
        let changed: Vec<&str> = [
            "catalog.base.C",
            "catalog.dependency.C",
            "catalog.summary.C",
        ]
        .into_iter()
        .filter(|p| replaced.contains_key(*p) || added.contains_key(*p))
        .collect();
        let files = catalog.files_after_change(&op_time, previous.as_ref(), &changed, updates);
        // Parts first, attrs last: attrs names the parts' signatures, so a reader that sees
        // the new attrs also finds the new parts.
        let mut files = files;
        files.rotate_left(1);
        for (name, body) in files {
            write_atomic(&catalog_dir.join(name), body.as_bytes())?;
        }
        Ok(())
    }

    /// Regenerates `publisher`'s catalog from the manifests under `pkg/`, like
    /// `pkgrepo rebuild`: each package's FMRI comes from its `set name=pkg.fmri` action, else
    /// from the manifest's path. Manifests that cannot be read or parsed are left out and
    /// returned as problems.
    pub fn rebuild_catalog(&self, publisher: &str) -> Result<Vec<RepoError>, RepoError> {
        self.rebuild_catalog_at(publisher, SystemTime::now())
    }

    /// [`FileRepo::rebuild_catalog`] with a given catalog time.
    pub fn rebuild_catalog_at(
        &self,
        publisher: &str,
        now: SystemTime,
    ) -> Result<Vec<RepoError>, RepoError> {
        let pub_dir = self.pub_dir(publisher)?;
        let _lock = lock_publisher(&pub_dir)?;
        let mut catalog = Catalog::default();
        let mut problems = Vec::new();
        let pkg_dir = pub_dir.join("pkg");
        let stems = match fs::read_dir(&pkg_dir) {
            Ok(rd) => rd
                .collect::<Result<Vec<_>, _>>()
                .map_err(io_err(&pkg_dir))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&pkg_dir)(e)),
        };
        for stem_entry in stems {
            let stem_path = stem_entry.path();
            if !stem_path.is_dir() {
                continue;
            }
            let versions = fs::read_dir(&stem_path)
                .and_then(|rd| rd.collect::<Result<Vec<_>, _>>())
                .map_err(io_err(&stem_path))?;
            for v in versions {
                let path = v.path();
                let from_path = || -> Option<Fmri> {
                    let stem = crate::fmri::unquote(stem_entry.file_name().to_str()?)?;
                    let ver = crate::fmri::unquote(v.file_name().to_str()?)?;
                    Fmri::parse(&format!("pkg://{publisher}/{stem}@{ver}")).ok()
                };
                let bytes = match read_limited(&path) {
                    Ok(b) => b,
                    Err(e) => {
                        problems.push(e);
                        continue;
                    }
                };
                let name =
                    from_path().map_or_else(|| path.display().to_string(), |f| f.to_string());
                let manifest = match Manifest::parse_bytes(&bytes) {
                    Ok(m) => m,
                    Err(source) => {
                        problems.push(RepoError::ManifestInvalid {
                            fmri: name,
                            path,
                            source,
                        });
                        continue;
                    }
                };
                let fmri = match manifest.fmri() {
                    Some(Ok(f)) => f.with_publisher(Some(publisher)).ok(),
                    _ => from_path(),
                };
                match fmri.filter(|f| f.version().is_some_and(|v| v.timestamp().is_some())) {
                    Some(f) => {
                        catalog
                            .add(&f, &manifest, &bytes)
                            .map_err(|source| RepoError::Catalog {
                                publisher: publisher.to_owned(),
                                source,
                            })?
                    }
                    None => problems.push(RepoError::Publish {
                        what: path.display().to_string(),
                        message: "no usable package FMRI".into(),
                    }),
                }
            }
        }
        let catalog_dir = pub_dir.join("catalog");
        let mut files = catalog.files(&catalog_time(now), true);
        files.rotate_left(1);
        for (name, body) in files {
            write_atomic(&catalog_dir.join(name), body.as_bytes())?;
        }
        // A rebuilt catalog starts again (a new `created`, no updates), as pkgrepo rebuild's:
        // the old update logs describe changes to a catalog that is gone.
        for e in fs::read_dir(&catalog_dir).map_err(io_err(&catalog_dir))? {
            let path = e.map_err(io_err(&catalog_dir))?.path();
            let is_log = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("update."));
            if is_log {
                fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
        Ok(problems)
    }

    fn store_payload(
        &self,
        publisher: &str,
        fmri: &Fmri,
        action: &mut Action,
        proto: Option<&Path>,
    ) -> Result<(), RepoError> {
        let what = action_name(action);
        let err = |message: String| RepoError::Publish {
            what: format!("{fmri}: {what}"),
            message,
        };
        let positional = action.hash().filter(|h| *h != "NOHASH").map(str::to_owned);
        let is_sha1 = positional
            .as_deref()
            .is_some_and(|h| h.len() == 40 && h.bytes().all(|c| c.is_ascii_hexdigit()));
        let source_rel = match (&positional, is_sha1) {
            (Some(p), false) => Some(p.clone()),
            _ => match action.kind() {
                ActionKind::File => action.get("path").map(str::to_owned),
                _ => None,
            },
        };
        let source = proto
            .zip(source_rel.as_deref())
            .map(|(dir, rel)| dir.join(rel.trim_start_matches('/')))
            .filter(|p| p.is_file());
        let Some(source) = source else {
            // No proto file: the payload must already be in the repository.
            if is_sha1 {
                let name = positional.expect("sha1");
                if self.payload_path(publisher, &name)?.is_file() {
                    return Ok(());
                }
            }
            let rel = source_rel.as_deref().unwrap_or("(no source path)");
            return Err(err(match proto {
                Some(dir) => format!(
                    "no payload: {rel} is not in the proto directory {}",
                    dir.display()
                ),
                None => format!(
                    "no payload: no proto directory was given to read {rel} from (pass the directory that holds the package's files, `--proto DIR`)"
                ),
            }));
        };
        let tmp_dir = self.root.join("publisher").join(publisher).join("tmp");
        create_dirs(&tmp_dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir).map_err(io_err(&tmp_dir))?;
        let input = File::open(&source).map_err(io_err(&source))?;
        let info = compress(BufReader::new(input), io::BufWriter::new(tmp.as_file_mut()))
            .map_err(io_err(&source))?;
        if is_sha1 && positional.as_deref() != Some(info.sha1.as_str()) {
            return Err(err(format!(
                "{} has sha-1 {}, the manifest says {}",
                source.display(),
                info.sha1,
                positional.unwrap_or_default()
            )));
        }
        let dest = self
            .pub_dir(publisher)?
            .join("file")
            .join(&info.sha1[..2])
            .join(&info.sha1);
        if !dest.exists() {
            let dir = dest.parent().expect("has parent");
            create_dirs(dir)?;
            set_file_mode(tmp.as_file(), &dest)?;
            tmp.as_file().sync_all().map_err(io_err(&dest))?;
            tmp.persist(&dest).map_err(|e| RepoError::Io {
                path: dest.clone(),
                source: e.error,
            })?;
        }
        info.apply_to(action);
        ElfInfo::strip_from(action);
        let elf =
            ElfInfo::read(File::open(&source).map_err(io_err(&source))?).map_err(|e| match e {
                ElfError::Io(e) => io_err(&source)(e),
                e => err(format!("{}: {e}", source.display())),
            })?;
        if let Some(elf) = elf {
            elf.apply_to(action);
        }
        Ok(())
    }
}

/// Serialises publishers of one publisher's catalog (across threads and processes) with an
/// advisory lock on `publisher/<pub>/tmp/publish.lock`, held until the guard drops. Where
/// the platform has no advisory locks, publishing goes on unlocked.
fn lock_publisher(pub_dir: &Path) -> Result<File, RepoError> {
    let tmp = pub_dir.join("tmp");
    create_dirs(&tmp)?;
    let path = tmp.join("publish.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(&path))?;
    set_file_mode(&file, &path)?;
    match file.lock() {
        Ok(()) => Ok(file),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(file),
        Err(e) => Err(io_err(&path)(e)),
    }
}
