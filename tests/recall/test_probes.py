"""The probe queries recall must keep answering (issue 25): what people search their
history for besides prose. Each finds its message first; where a near miss is the point
(``5432`` is not ``5433``, ``university`` is not ``universe``) the near miss is not found
at all."""

from __future__ import annotations

import pytest

from shared.recall.documents import Document
from shared.recall.ranking import SearchRequest
from tests.support.recall_oracle import indexed, results

MESSAGES = {
    "port": "我们的数据库端口是 5433，别用默认的 5432",
    "other-port": "the cache listens on 5432 now",
    "snake": "The flaky test is test_upload_resume, it times out on the arm64 CI runner",
    "camel": "rename getUserName to fetchUserName before the release",
    "path": "备份脚本每天凌晨两点跑，日志在 /var/log/backup.log",
    "version": "we pinned v1.4.2 after v1.4.3 broke the build",
    "arch": "the wheel is built for x86_64 only, not aarch64",
    "ip": "bind the admin server to 127.0.0.1 instead of 0.0.0.0",
    "phrase": "use tabs for indentation in the Makefile, spaces everywhere else",
    "redis": "生产环境的 Redis 密码放在 1Password 的 infra 保险库里",
    "buy": "周末去超市买了很多水果",
    "migration": "the migrations ran twice on staging",
    "university": "she studies at the university of Tokyo",
    "universe": "a documentary about the universe",
    "filler": "nothing to see in this message at all",
}


@pytest.fixture(scope="module")
def search() -> object:
    documents = [
        Document(name, "c1", "user", float(n), text, False)
        for n, (name, text) in enumerate(MESSAGES.items())
    ]
    index = indexed(documents)

    def ids(query: str) -> list[str]:
        return [i for i, _ in results(index, documents, SearchRequest(query, limit=20))]

    return ids


@pytest.mark.parametrize(
    ("query", "first", "absent"),
    [
        ("5433", "port", ["other-port"]),
        ("5432", "port", []),
        ("test_upload_resume", "snake", []),
        ('"test_upload_resume"', "snake", ["filler"]),
        ("getUserName", "camel", []),
        ("fetchusername", "camel", []),
        ("/var/log/backup.log", "path", []),
        ('"/var/log/backup.log"', "path", ["filler"]),
        ("v1.4.2", "version", []),
        ('"v1.4.2"', "version", []),
        ("x86_64", "arch", []),
        ("127.0.0.1", "ip", []),
        ('"127.0.0.1"', "ip", []),
        ('"tabs for indentation"', "phrase", ["filler"]),
        ("买", "buy", []),
        ("数据", "port", []),
        ("数据库", "port", []),
        ("数据库端", "port", []),
        ("数据库端口", "port", []),
        ("凌晨两点", "path", []),
        ("redis 密码", "redis", []),
        ('"Redis 密码"', "redis", []),
        ("migration", "migration", []),
        ("migrations", "migration", []),
        ("university", "university", ["universe"]),
        ("universe", "universe", ["university"]),
    ],
)
def test_a_probe_finds_its_message_first(
    search: object, query: str, first: str, absent: list[str]
) -> None:
    found = search(query)  # type: ignore[operator]
    assert found[:1] == [first]
    assert not set(absent) & set(found)


def test_a_quoted_version_is_not_its_neighbour(search: object) -> None:
    assert search('"v1.4.3"') == ["version"]  # type: ignore[operator]
    assert search('"v1.4.4"') == []  # type: ignore[operator]
