//! The Distribution API's path grammar: [`Route`] names the endpoint a `/v2/...` path
//! addresses, splitting it from the right because repository names may hold any number of
//! `/`. The router, access control and the request counter all read paths through it.

/// A parsed `/v2/<...>` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `/v2/_catalog`
    Catalog,
    /// `/v2/<name>/blobs/<digest>`
    Blob { name: String, digest: String },
    /// `/v2/<name>/blobs/uploads/` and `/v2/<name>/blobs/uploads/<id>`
    Upload { name: String, id: Option<String> },
    /// `/v2/<name>/manifests/<reference>`
    Manifest { name: String, reference: String },
    /// `/v2/<name>/tags/list`
    Tags { name: String },
    /// `/v2/<name>/referrers/<digest>`
    Referrers { name: String, digest: String },
    /// `/v2/_rd/packages`: the package search (an extension; `_rd` can start no repository
    /// name, whose components begin with `[a-z0-9]`).
    PackageSearch,
    /// `/v2/<name>/_rd/packages/<reference>`: the indexed packages of one image.
    Packages { name: String, reference: String },
    /// `/v2/_rd/sync`: the status of every `[[sync]]` entry (an extension).
    SyncStatus,
}

impl Route {
    /// Parses the path after `/v2/`; `None` when it names no endpoint.
    pub fn parse(rest: &str) -> Option<Route> {
        if rest == "_catalog" {
            return Some(Route::Catalog);
        }
        if rest == "_rd/packages" {
            return Some(Route::PackageSearch);
        }
        if rest == "_rd/sync" {
            return Some(Route::SyncStatus);
        }
        if let Some(name) = rest
            .strip_suffix("/blobs/uploads/")
            .or_else(|| rest.strip_suffix("/blobs/uploads"))
        {
            return Some(Route::Upload {
                name: name.to_owned(),
                id: None,
            });
        }
        let (head, last) = rest.rsplit_once('/')?;
        let (head2, kind) = head.rsplit_once('/')?;
        let name = head2.to_owned();
        let arg = last.to_owned();
        match kind {
            "uploads" => {
                let name = head2.strip_suffix("/blobs")?.to_owned();
                Some(Route::Upload {
                    name,
                    id: Some(arg),
                })
            }
            "blobs" => Some(Route::Blob { name, digest: arg }),
            "manifests" => Some(Route::Manifest {
                name,
                reference: arg,
            }),
            "tags" if last == "list" => Some(Route::Tags { name }),
            "referrers" => Some(Route::Referrers { name, digest: arg }),
            "packages" => Some(Route::Packages {
                name: head2.strip_suffix("/_rd")?.to_owned(),
                reference: arg,
            }),
            _ => None,
        }
    }

    /// A low-cardinality label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Catalog => "catalog",
            Route::Blob { .. } => "blob",
            Route::Upload { .. } => "upload",
            Route::Manifest { .. } => "manifest",
            Route::Tags { .. } => "tags",
            Route::Referrers { .. } => "referrers",
            Route::PackageSearch => "package_search",
            Route::Packages { .. } => "packages",
            Route::SyncStatus => "sync_status",
        }
    }

    pub fn name(&self) -> Option<&str> {
        match self {
            Route::Catalog | Route::PackageSearch | Route::SyncStatus => None,
            Route::Blob { name, .. }
            | Route::Upload { name, .. }
            | Route::Manifest { name, .. }
            | Route::Tags { name }
            | Route::Referrers { name, .. }
            | Route::Packages { name, .. } => Some(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_split_from_the_right() {
        let s = |x: &str| x.to_owned();
        let cases = [
            ("_catalog", Some(Route::Catalog)),
            (
                "a/b/blobs/sha256:x",
                Some(Route::Blob {
                    name: s("a/b"),
                    digest: s("sha256:x"),
                }),
            ),
            (
                "a/blobs/uploads/",
                Some(Route::Upload {
                    name: s("a"),
                    id: None,
                }),
            ),
            (
                "a/blobs/uploads/u-1",
                Some(Route::Upload {
                    name: s("a"),
                    id: Some(s("u-1")),
                }),
            ),
            (
                "x/manifests/y/manifests/latest",
                Some(Route::Manifest {
                    name: s("x/manifests/y"),
                    reference: s("latest"),
                }),
            ),
            ("a/b/tags/list", Some(Route::Tags { name: s("a/b") })),
            (
                "r/referrers/sha256:x",
                Some(Route::Referrers {
                    name: s("r"),
                    digest: s("sha256:x"),
                }),
            ),
            ("_rd/packages", Some(Route::PackageSearch)),
            ("_rd/sync", Some(Route::SyncStatus)),
            (
                "zones/demo/_rd/packages/1.0",
                Some(Route::Packages {
                    name: s("zones/demo"),
                    reference: s("1.0"),
                }),
            ),
            ("zones/demo/packages/1.0", None),
            ("a/tags/other", None),
            ("a", None),
            ("a/unknown/x", None),
        ];
        for (path, want) in cases {
            assert_eq!(Route::parse(path), want, "{path}");
        }
    }
}
