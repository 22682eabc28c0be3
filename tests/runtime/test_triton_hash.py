"""Triton's hash of its own files (`triton_key`), computed by a child interpreter so that the thread
that waits for it holds no GIL while Dynamo traces (runtime/launch/precompile.py `hash_triton`)."""
import textwrap

from mini_inductor.runtime.launch import precompile


def test_the_childs_hash_is_the_one_triton_computes_here():
    from triton.runtime import cache
    key = precompile.triton_key_from_a_child()
    assert key is not None
    # Triton's own function, uncached (on a CUDA machine the setup thread has already handed Triton a key)
    assert key == cache.triton_key.__wrapped__()


def test_a_child_that_imports_another_triton_is_not_believed(tmp_path):
    fake = tmp_path / "triton"
    (fake / "runtime").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "runtime" / "__init__.py").write_text("")
    (fake / "runtime" / "cache.py").write_text(textwrap.dedent("""
        def triton_key():
            return "a key of another package"
    """))
    assert precompile.triton_key_from_a_child(root=str(tmp_path)) is None


def test_a_child_that_fails_or_hangs_is_not_believed(tmp_path, monkeypatch):
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise SystemExit(3)\n")
    assert precompile.triton_key_from_a_child(root=str(tmp_path)) is None
    (tmp_path / "triton" / "__init__.py").write_text("import time\ntime.sleep(30)\n")
    assert precompile.triton_key_from_a_child(root=str(tmp_path), timeout=1.0) is None


def test_the_hash_is_handed_to_triton_or_computed_here(monkeypatch):
    from triton.runtime import cache
    original = cache.triton_key
    monkeypatch.setattr(cache, "triton_key", original)    # restored after the test
    monkeypatch.setattr(precompile, "triton_key_from_a_child", lambda: "the child's key")
    assert precompile.hash_triton() == "the child's key"
    assert cache.triton_key() == "the child's key"        # what get_cache_key reads
    monkeypatch.setattr(cache, "triton_key", original)
    monkeypatch.setattr(precompile, "triton_key_from_a_child", lambda: None)
    assert precompile.hash_triton() == original()         # no child: Triton hashes here, as before
    assert cache.triton_key is original
    monkeypatch.setattr(precompile, "triton_key_from_a_child", lambda: "the child's key")
    monkeypatch.setenv("MINI_INDUCTOR_TRITON_HASH", "here")   # asked for: hashed here, no child
    assert precompile.hash_triton() == original() and cache.triton_key is original
