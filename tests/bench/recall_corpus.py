"""The recall benchmarks' corpus and queries (``recall_bench.py``, ``recall_startup.py``).

The corpus is generated deterministically (seeded ``random.Random``): N messages across
200 conversations, about half Chinese, 40 % English and 10 % Chinese mixed with English
identifiers and numbers; short user messages, longer assistant replies, tool calls and
tool results (logs, code, command output); Zipf-distributed vocabularies, so common terms
are common and rare ones rare; ~2 % of assistant/tool messages are echoes of recall
searches; a few "needle" facts sit at known positions. Each document's ``offset`` is its
number in the stream (an index built from the stream rather than from logs reads hits by
it).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime

from shared.recall.documents import Document
from shared.recall.ranking import SearchRequest
from shared.recall.text import is_cjk, tokenize


def _words(text: str) -> list[str]:
    return text.split()


# --- vocabularies --------------------------------------------------------------------------

ZH_COMMON = _words("""
我们 这个 问题 可以 没有 什么 需要 因为 所以 但是 如果 已经 现在 时候 应该 知道 觉得 一下
然后 还是 就是 这样 怎么 今天 一些 为什么 文件 数据 系统 服务 配置 代码 测试 部署 版本 错误
日志 用户 项目 功能 接口 数据库 服务器 客户端 网络 性能 内存 磁盘 进程 线程 请求 响应 结果
参数 变量 函数 模块 目录 路径 端口 密码 账号 权限 安全 环境 生产 开发 分支 提交 合并 修改
更新 删除 创建 检查 运行 启动 停止 重启 安装 升级 回滚 备份 恢复 监控 告警 报错 超时 失败
成功 完成 开始 结束 继续 帮我 看看 处理 解决 分析 优化 设计 实现 支持 使用 调用 返回 输出
输入 格式 内容 信息 记录 消息 通知 邮件 会议 讨论 计划 安排 预算 报告 文档 说明 例子 建议
意见 想法 决定 确认 同意 注意 记住 提醒 重要 简单 复杂 清楚 明白 其实 可能 一定 非常 比较
特别 经常 总是 一直 马上 最近 以后 之前 下午 上午 晚上 周末 星期 每天 公司 团队 同事 经理
客户 老板 朋友 家里 孩子 周五 下周 上周 中文 英文 翻译 学习 阅读 写作 大家 自己 一起 分钟
小时 价格 费用 成本 质量 速度 效率 体验 界面 页面 按钮 窗口 浏览器 手机 电脑 键盘 屏幕 缓存
队列 索引 查询 搜索 排序 过滤 统计 图表 表格 字段 主键 事务 连接 集群 节点 容器 镜像 脚本
命令 终端 编辑器 插件 依赖 框架 语言 算法 模型 训练 推理 向量 上下文 提示词 对话 记忆 摘要
压缩 长度 限制 默认 选项 设置 开关 规则 策略 流程 步骤 阶段 目标 指标 需求 反馈 评审 上线
发布 灰度 回归 单元测试 集成测试 负载均衡 配置文件 环境变量 命令行 工作流 时间戳 字符串 整数
列表 字典 对象 异常 堆栈 断点 调试 编译 打包 签名 证书 域名 防火墙 代理 网关 协议 加密 解密
哈希 令牌 会话 登录 注册 退出 明天 昨天 工作 时间 事情 东西 地方 方法 他们 你们 那个
""")
"""Common Chinese words, roughly most frequent first (the Zipf ranks follow this order)."""

ZH_CHARS = (
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对"
    "可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同"
    "三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定"
    "女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化"
    "由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应"
    "路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许"
)
"""Common characters; rarer Chinese words are composed from them."""

EN_COMMON = _words("""
the to and a of is in it you that for this i on with be we can not are have as if but
do at will so what from or just it's file use need check run test error code data
should there here then now one can't don't by my your all like get make see new let
me some no time add fix change update work also when how which set up out about more
server config function call value return build deploy version user issue problem
line output input log path name type list string number first last next because
would could try right same other only way back still well into than them these those
thanks sure yes ok good great looks done open close start stop read write create
delete move copy keep find show help want know think mean say tell ask look give
take put go come seems used using works working failed failing passed running
database port key vault staging production branch commit merge review request
response client service api endpoint token session cache queue index query search
result results memory disk cpu process thread timeout retry connection refused
""")
"""Common English words, roughly most frequent first; synthetic words make the tail."""

SYLLABLES = _words("""
ba be bi bo bu da de di do du ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni
no nu pa pe pi po pu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo za ze
tra tre tri tro pla ple pli sta ste sti sto cha che chi cho sha she shi sho ver ter
ion ent ant ous ing ble fer con pro per gra gre
""")

TECH = _words("""
Postgres Redis nginx Docker k8s Kubernetes v2 v3 v1.4.2 API CI PR HTTP JSON YAML
Python pytest git main GPT-4 OpenAI SQLite uvicorn asyncio README Makefile
src/agentd/turns.py shared/recall/index.py config.toml /var/log/syslog localhost
127.0.0.1 5432 5433 8080 3000 6379 443 22 404 500 502 2024 2025 arm64 x86_64 utf-8
""")
"""Identifiers and numbers that mixed Chinese messages carry."""

TOOLS = ("run_command", "read_file", "write_file", "web_search", "http_request", "list_dir")
LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")

NEEDLES = (
    "我们的数据库端口是 5433，别用默认的 5432",
    "The staging deploy key lives in vault path secret/deploy/staging",
    "生产环境的 Redis 密码放在 1Password 的 infra 保险库里",
    "The flaky test is test_upload_resume, it times out on the arm64 CI runner",
    "周五下午三点和王经理开会讨论季度预算",
    "My cat is called Biscuit and she hates the vacuum cleaner",
    "备份脚本每天凌晨两点跑，日志在 /var/log/backup.log",
    "Remember: use tabs for indentation in the Makefile, spaces everywhere else",
)
"""Facts with specific answers, each placed at two known positions (see ``needles``)."""

RECALL_QUERIES = ("数据库端口", "deploy key", "staging vault", "季度预算", "flaky test", "Biscuit")
"""What the echo messages (earlier recall searches) searched for."""

START = datetime(2023, 1, 1, tzinfo=UTC).timestamp()


def needles(scan_messages: int, messages: int) -> dict[int, str]:
    """Each needle once inside the first ``scan_messages`` and once later on."""
    placed: dict[int, str] = {}
    for k, text in enumerate(NEEDLES):
        placed[(k + 1) * scan_messages // (len(NEEDLES) + 2)] = text
        if messages > scan_messages:
            later = scan_messages + (k + 1) * (messages - scan_messages) // (len(NEEDLES) + 1)
            placed[later] = text
    return placed


def _zipf(count: int, s: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (rank + 2.7) ** s for rank in range(count)))


class Corpus:
    """A deterministic stream of documents; the first n of any run are the same."""

    def __init__(self, seed: int, conversations: int, placed: dict[int, str]) -> None:
        self.seed = seed
        vocab = random.Random(seed)
        rare_zh: list[str] = []
        seen = set(ZH_COMMON)
        while len(rare_zh) < 4_000:
            word = "".join(vocab.choices(ZH_CHARS, k=vocab.choice((2, 2, 3, 3, 4))))
            if word not in seen:
                seen.add(word)
                rare_zh.append(word)
        self.zh = ZH_COMMON + rare_zh
        self.zh_cum = _zipf(len(self.zh), 1.0)
        synthetic: list[str] = []
        seen = set(EN_COMMON)
        while len(synthetic) < 3_000:
            word = "".join(vocab.choices(SYLLABLES, k=vocab.choice((2, 2, 3, 3, 3, 4))))
            if word not in seen:
                seen.add(word)
                synthetic.append(word)
        self.en = EN_COMMON + synthetic
        self.en_cum = _zipf(len(self.en), 1.05)
        self.conversations = [f"conv_{i:03d}" for i in range(conversations)]
        self.conversation_cum = _zipf(conversations, 0.8)
        self.placed = placed

    # --- words and texts ---

    def en_words(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.en, cum_weights=self.en_cum, k=k)

    def zh_words(self, rng: random.Random, k: int) -> list[str]:
        return rng.choices(self.zh, cum_weights=self.zh_cum, k=k)

    def english(self, rng: random.Random, chars: int) -> str:
        words = self.en_words(rng, max(2, chars // 6))
        step = rng.randint(6, 14)
        sentences = [" ".join(words[i : i + step]) for i in range(0, len(words), step)]
        text = ". ".join(sentences) + "."
        return text[0].upper() + text[1:]

    def chinese(self, rng: random.Random, chars: int, mixed: bool = False) -> str:
        words = self.zh_words(rng, max(1, chars * 10 // 23))
        step = rng.randint(3, 7)
        clauses = ["".join(words[i : i + step]) for i in range(0, len(words), step)]
        parts = []
        for n, clause in enumerate(clauses):
            if mixed and rng.random() < 0.6:
                tech = rng.choice(TECH) if rng.random() < 0.7 else str(rng.randint(1, 9999))
                clause = f"{clause} {tech} {self.zh_words(rng, 1)[0]}"
            parts.append(clause)
            parts.append("。" if n % 3 == 2 else "，")
        parts[-1] = "。"
        return "".join(parts)

    def prose(self, rng: random.Random, chars: int) -> str:
        pick = rng.random()
        if pick < 0.5:
            return self.chinese(rng, chars)
        if pick < 0.9:
            return self.english(rng, chars)
        return self.chinese(rng, chars, mixed=True)

    def ident(self, rng: random.Random) -> str:
        a, b = self.en_words(rng, 2)
        return f"{a}_{b}"

    def tool_output(self, rng: random.Random, chars: int) -> str:
        if rng.random() < 0.15:  # a document or web page, in prose
            return self.prose(rng, chars)
        lines: list[str] = []
        size = 0
        kind = rng.randrange(5)
        while size < chars:
            if kind == 0:  # a log
                words = " ".join(self.en_words(rng, rng.randint(3, 9)))
                line = (
                    f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                    f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
                    f"{rng.choice(LEVELS)} {self.en_words(rng, 1)[0]}[{rng.randint(1, 99)}] "
                    f"{words} in {rng.randint(1, 999)}ms"
                )
            elif kind == 1:  # a traceback
                line = (
                    f'  File "src/{self.ident(rng)}/{self.ident(rng)}.py", '
                    f"line {rng.randint(1, 900)}, in {self.ident(rng)}"
                )
                if rng.random() < 0.2:
                    line += "\nConnectionRefusedError: [Errno 111] Connection refused"
            elif kind == 2:  # code
                a, b, c = self.ident(rng), self.ident(rng), self.ident(rng)
                line = rng.choice(
                    (
                        f"def {a}({b}, {c}):",
                        f"    return {b}.{c}({rng.randint(0, 99)})",
                        f"    {a} = {b}[{c!r}]",
                        f"    if {a} is None: raise ValueError({c!r})",
                        f"class {a.title().replace('_', '')}({b.title().replace('_', '')}):",
                    )
                )
            elif kind == 3:  # test output
                line = (
                    f"tests/test_{self.ident(rng)}.py::test_{self.ident(rng)} "
                    f"{rng.choice(('PASSED', 'PASSED', 'PASSED', 'FAILED', 'SKIPPED'))}"
                )
            else:  # a listing
                line = (
                    f"-rw-r--r-- 1 agent staff {rng.randint(0, 99999):>6} "
                    f"{self.ident(rng)}/{self.ident(rng)}.{rng.choice(('py', 'md', 'json'))}"
                )
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def tool_call(self, rng: random.Random, tool: str) -> str:
        lead = self.prose(rng, rng.randint(10, 60)) + "\n" if rng.random() < 0.5 else ""
        if tool == "run_command":
            args = {"command": f"pytest -q tests/test_{self.ident(rng)}.py"}
        elif tool in ("read_file", "write_file", "list_dir"):
            args = {"path": f"src/{self.ident(rng)}/{self.ident(rng)}.py"}
        elif tool == "recall_search":
            args = {"query": rng.choice(RECALL_QUERIES)}
        else:
            args = {"query": " ".join(self.en_words(rng, rng.randint(2, 5)))}
        return f"{lead}{tool}\n{json.dumps(args, ensure_ascii=False)}"

    def recall_result(self, rng: random.Random, query: str) -> str:
        hits = [
            f"[{n}] conv_{rng.randrange(200):03d} user: {query} {self.prose(rng, 60)}"
            for n in range(1, rng.randint(2, 6))
        ]
        return "\n".join(hits)

    # --- the stream ---

    def documents(self) -> Iterator[Document]:
        """The endless stream: sessions of turns in conversations picked Zipf-wise."""
        rng = random.Random(self.seed + 1)
        number = 0
        now = START
        while True:
            conversation = rng.choices(self.conversations, cum_weights=self.conversation_cum)[0]
            now += rng.expovariate(1 / 600)
            for _ in range(rng.choice((1, 1, 2, 2, 3, 4, 6))):
                turn: list[tuple[str, str, bool]] = []
                turn.append(("user", self.prose(rng, int(10 + 70 * rng.random() ** 2)), False))
                if rng.random() < 0.45:
                    for _ in range(rng.choices((1, 2, 3), weights=(5, 3, 2))[0]):
                        if rng.random() < 0.03:
                            query = rng.choice(RECALL_QUERIES)
                            call = self.tool_call(rng, "recall_search")
                            call = call.rsplit("\n", 1)[0] + "\n" + json.dumps({"query": query})
                            turn.append(("assistant", call, True))
                            turn.append(("tool", self.recall_result(rng, query), True))
                        else:
                            tool = rng.choice(TOOLS)
                            turn.append(("assistant", self.tool_call(rng, tool), False))
                            chars = int(100 + 1400 * rng.random() ** 1.5)
                            turn.append(("tool", self.tool_output(rng, chars), False))
                turn.append(
                    ("assistant", self.prose(rng, int(40 + 560 * rng.random() ** 1.5)), False)
                )
                for role, text, echo in turn:
                    now += rng.uniform(1, 30)
                    needle = self.placed.get(number)
                    if needle is not None:
                        role, text, echo = "user", needle, False
                    yield Document(
                        message_id=f"msg_{int(now * 1000):013X}{number:013X}",
                        conversation_id=conversation,
                        role=role,
                        created_at=now,
                        text=text,
                        echo=echo,
                        offset=number,
                    )
                    number += 1
                now += rng.uniform(10, 240)


# --- queries -------------------------------------------------------------------------------

FILTER_BASE = (
    "deploy key",
    "数据库端口",
    "error timeout",
    "配置文件",
    '"connection refused"',
    "redis 密码",
    "check",
    "我们",
    "5433",
    "test failed",
)
"""The queries the filtered variants filter."""

DATE_RANGES = (
    (0.1, 0.3),
    (0.5, 0.6),
    (0.0, 0.05),
    (0.9, None),
    (None, 0.2),
    (0.3, 0.31),
    (0.6, 0.9),
    (0.2, 0.8),
    (0.95, None),
    (None, 0.5),
)
"""since/until as fractions of the scan corpus (so every range also exists at 100k)."""


def _sample_phrases(
    documents: list[Document], rng: random.Random, count: int, cjk: bool
) -> list[str]:
    """Phrases that really occur: runs of English tokens, or substrings of CJK tokens."""
    phrases: list[str] = []
    while len(phrases) < count:
        document = documents[rng.randrange(len(documents))]
        if document.role != "assistant" or "\n" in document.text:
            continue
        tokens = tokenize(document.text)
        if cjk:
            long = [t for t in tokens if is_cjk(t) and len(t) >= 8]
            if not long:
                continue
            token = rng.choice(long)
            size = rng.randint(4, 6)
            start = rng.randrange(len(token) - size + 1)
            phrase = token[start : start + size]
        else:
            if len(tokens) < 6 or any(is_cjk(t) for t in tokens):
                continue
            size = rng.choice((2, 3))
            start = rng.randrange(len(tokens) - size + 1)
            phrase = " ".join(tokens[start : start + size])
        if f'"{phrase}"' not in phrases:
            phrases.append(f'"{phrase}"')
    return phrases


def query_sets(corpus: Corpus, documents: list[Document]) -> dict[str, list[SearchRequest]]:
    """At least ten queries per type; ``documents`` is the scan corpus (phrases, dates)."""
    rng = random.Random(corpus.seed + 2)
    rare_en = [corpus.en[len(EN_COMMON) + rank] for rank in (400, 900, 1500, 2000, 2500, 2999)]
    rare_zh = [corpus.zh[len(ZH_COMMON) + rank] for rank in (1000, 2000, 3000, 3999)]
    plain = {
        "1 term, common EN": [
            "check", "error", "file", "test", "deploy", "server", "config", "database",
            "timeout", "thanks",
        ],
        "1 term, rare EN": [*rare_en, "biscuit", "vacuum", "arm64", "upload"],
        "1 term, number": [
            "5433", "5432", "8080", "6379", "404", "2024", "111", "42", "500", "1234",
        ],
        "2-4 EN terms": [
            "deploy key", "staging deploy key", "vault path secret", "flaky test arm64",
            "database port", "connection refused retry", "error timeout server", "the file is",
            "biscuit vacuum cleaner", "config user session cache",
        ],
        "CJK 2 chars": [
            "我们", "问题", "数据", "配置", "部署", "日志", "端口", "密码", "预算", "会议",
        ],
        "CJK 3-4 chars": [
            "数据库", "服务器", "为什么", "配置文件", "单元测试", "负载均衡", "环境变量",
            "浏览器", "提示词", "时间戳",
        ],
        "CJK rare/needle": [
            "数据库端口", "保险库", "王经理", "季度预算", "凌晨两点", "备份脚本", *rare_zh,
        ],
        "phrase EN": [
            '"deploy key"', '"vault path"', '"connection refused"', '"arm64 CI runner"',
            '"the vacuum cleaner"', *_sample_phrases(documents, rng, 5, cjk=False),
        ],
        "phrase CJK": [
            '"数据库端口"', '"季度预算"', '"Redis 密码"', '"凌晨两点"', '"数据库 端口"',
            *_sample_phrases(documents, rng, 5, cjk=True),
        ],
    }  # fmt: skip
    sets = {kind: [SearchRequest(q) for q in queries] for kind, queries in plain.items()}
    ranks = (0, 1, 2, 5, 10, 20, 50, 100, 150, 199)
    conversations = [corpus.conversations[r % len(corpus.conversations)] for r in ranks]
    sets["filter: conversation"] = [
        SearchRequest(q, conversation_id=c) for q, c in zip(FILTER_BASE, conversations, strict=True)
    ]
    roles = itertools.cycle(("user", "assistant", "tool"))
    sets["filter: role"] = [SearchRequest(q, role=next(roles)) for q in FILTER_BASE]

    def at(fraction: float | None) -> datetime | None:
        if fraction is None:
            return None
        position = min(int(fraction * len(documents)), len(documents) - 1)
        return datetime.fromtimestamp(documents[position].created_at, UTC)

    sets["filter: since/until"] = [
        SearchRequest(q, since=at(a), until=at(b))
        for q, (a, b) in zip(FILTER_BASE, DATE_RANGES, strict=True)
    ]
    sets["current conversation"] = [
        SearchRequest(q, current_conversation_id=c)
        for q, c in zip(FILTER_BASE, conversations, strict=True)
    ]
    return sets


def describe(request: SearchRequest) -> str:
    extra = [
        f"{name}={value if not isinstance(value, datetime) else value.date()}"
        for name in ("conversation_id", "role", "since", "until", "current_conversation_id")
        if (value := getattr(request, name)) is not None
    ]
    return " ".join([request.query, *extra])
