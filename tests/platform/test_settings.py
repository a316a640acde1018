import pytest
from hir.errors import SettingsError
from hir.settings import Settings


def test_env_overrides_defaults(tmp_path):
    s = Settings.from_env({"HIR_DATA_HOME": str(tmp_path), "HIR_THREADS": "3", "HIR_HALF_LIFE_DAYS": "click=2"})
    assert s.data_home == tmp_path.resolve()
    assert s.threads == 3
    assert s.half_life("click") == 2.0
    assert s.half_life("impression") == 3.0
    assert s.half_life("never-seen") == s.default_half_life_days


def test_bad_value_names_the_variable():
    with pytest.raises(SettingsError, match="HIR_THREADS"):
        Settings.from_env({"HIR_THREADS": "many"})


def test_path_outside_data_home_refused_unless_allowed(tmp_path):
    s = Settings.from_env({"HIR_DATA_HOME": str(tmp_path / "home")})
    assert s.resolve_path(tmp_path / "home" / "x", "HIR_X") == (tmp_path / "home" / "x").resolve()
    with pytest.raises(SettingsError, match="outside the data home"):
        s.resolve_path(tmp_path / "elsewhere", "HIR_X")
    allowed = Settings.from_env({"HIR_DATA_HOME": str(tmp_path / "home"), "HIR_ALLOW_OUTSIDE_PATHS": "1"})
    assert allowed.resolve_path(tmp_path / "elsewhere", "HIR_X") == (tmp_path / "elsewhere").resolve()
