//! What `rdctl build` reads and checks before building: the `--push` destination, the
//! `SOURCE_DATE_EPOCH` and the signing key.

use anyhow::{Context, bail};
use registry_client::transfer::ImageRef;

use super::Args;

/// What is read and checked before the build, so a bad reference, epoch or key fails in a
/// moment, not after it.
pub(super) struct Inputs {
    pub(super) push: Option<ImageRef>,
    pub(super) source_date_epoch: Option<u64>,
    pub(super) sign_key: Option<trust::SigningKey>,
}

impl Inputs {
    pub(super) fn read(args: &Args) -> anyhow::Result<Inputs> {
        let push = match &args.push {
            Some(r) => Some(push_target(r, &args.image_file)?),
            None => None,
        };
        let source_date_epoch =
            match std::env::var("SOURCE_DATE_EPOCH") {
                Ok(s) => Some(s.trim().parse::<u64>().with_context(|| {
                    format!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds")
                })?),
                Err(_) => None,
            };
        // The key is read (and its password asked for) before the build, not after it.
        let sign_key = match &args.sign_key {
            Some(k) => Some(crate::commands::trust::load_signing_key(k, &args.password)?),
            None => None,
        };
        Ok(Inputs {
            push,
            source_date_epoch,
            sign_key,
        })
    }
}

/// The `--push` destination: a reference, or a registry host alone, whose repository is then
/// the image file's `name` (as docs/image-file.md says).
fn push_target(arg: &str, image_file: &std::path::Path) -> anyhow::Result<ImageRef> {
    let host = arg.strip_prefix("docker://").unwrap_or(arg);
    if !host.contains('/') && registry_client::looks_like_host(host) {
        let image = builder::ImageFile::load(image_file)
            .with_context(|| format!("cannot read {}", image_file.display()))?;
        let Some(name) = image.name else {
            bail!(
                "--push {arg}: {host} is a registry host without a repository: give one (--push {host}/site/web) or set `name` in {}",
                image_file.display()
            );
        };
        let full = format!("{host}/{name}");
        return ImageRef::parse_registry(&full).with_context(|| {
            format!(
                "--push {arg} with `name = {name:?}` from {}",
                image_file.display()
            )
        });
    }
    ImageRef::parse_registry(arg).with_context(|| format!("--push {arg}"))
}
