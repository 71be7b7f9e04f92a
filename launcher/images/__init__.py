"""Pinned-wheel images: catalog, resolver, lock, wheelhouse, Dockerfile, build and push.

`catalog`, `rules`, `wheels`, `resolve`, `lock`, `dockerfile`, `buildplan`, `ci` and `driver`
are pure (data in, data out) and unit-tested offline. Side effects live in `index` (reading
package indexes), `wheelhouse` (fetching and verifying wheels), `docker_build` (Docker SDK),
`refresh` (the online catalog update) and `commands` (what `gpujob image ...` calls).
May import launcher.spec and launcher.errors; nothing imports it but the CLI and infra.
"""
