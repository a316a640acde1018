"""``hir serve``: Feast's HTTP feature server over the hir repository (``feast serve`` on 127.0.0.1),
reading the online store the ``online_store`` setting names.

Rankers in other processes POST ``{"feature_service": "ranker_v1", "entities": {"user_key": [...],
"ad_key": [...]}}`` to ``http://127.0.0.1:<port>/get-online-features``. The port defaults to
``HIR_FEAST_PORT``; the server reads the registry again every ``--registry-ttl`` seconds, so views
applied later appear without a restart.
"""

from __future__ import annotations

import argparse

from hir.settings import Settings

HELP = "start Feast's HTTP feature server on 127.0.0.1 (POST /get-online-features)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, help="port (default HIR_FEAST_PORT or 6566)")
    parser.add_argument("--registry-ttl", type=int, default=60, help="seconds between registry refreshes")
    parser.add_argument("--data-home", help="data home (default HIR_DATA_HOME or ./.hir)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from hir.serving.feast_store import FeastStore

    feast = FeastStore.from_settings(settings)
    feast.require_registry()
    port = args.port or settings.feast_port
    print(f"hir serve: http://127.0.0.1:{port}/get-online-features (registry {feast.repo_config().registry.path}, "
          f"online store {feast.online_target})", flush=True)
    feast.store().serve(host="127.0.0.1", port=port, type_="http", no_access_log=True, workers=1,
                        registry_ttl_sec=args.registry_ttl)
    return 0
