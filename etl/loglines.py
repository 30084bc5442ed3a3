"""How a log line becomes a row of `log_lines`: its severity is read into its own column, its code
position (`logger#line`) into `event`, and its leading time stamp and level are cut, so that an
ERROR line and an INFO line of the same shape share a template whose minutes still count the errors.
The rest is masked in SQL (ids, IPs, numbers, UUIDs, hex) as a day loads (`masked`), and each distinct
masked message is mined once by Drain3 in the catalog, day after day in order; the miner's state lives in
the store, so template ids stay the same from one nightly run to the next, wherever the days loaded."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from drain3 import TemplateMiner
from drain3.persistence_handler import PersistenceHandler
from drain3.template_miner_config import TemplateMinerConfig

# Applied in order; SQL (RE2) patterns over the text a log line is templated from.
MASKS = (
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", "<UUID>"),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(:\d+)?", "<IP>"),
    (r"\b(0x)?[0-9a-fA-F]*\d[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\b|\b[0-9a-fA-F]*[a-fA-F][0-9a-fA-F]*\d[0-9a-fA-F]*\b",
     "<HEX>"),
    (r"\b[A-Z0-9]{10}\b", "<ID>"),
    (r"-?\b\d+(\.\d+)?\b", "<NUM>"),
)
MAX_CHARS = 400
LEVELS = "trace|debug|info|notice|warn|warning|error|err|fatal|critical|crit|severe|panic"
ERROR_LEVELS = ("ERROR", "ERR", "FATAL", "CRITICAL", "CRIT", "SEVERE", "PANIC")


LEAD = "^[\\s\\d:.,/TZ+\\[-]*"  # a leading time stamp, and an opening bracket


def level_sql(column: str) -> str:
    """The severity word that opens a line (after its time stamp), upper case, or null."""
    return f"upper(nullif(regexp_extract(left({column}, 40), '{LEAD}(?i:({LEVELS}))\\b', 1), ''))"


def body_sql(column: str) -> str:
    """The line without its leading time stamp and severity."""
    return f"regexp_replace({column}, '{LEAD}(?i:({LEVELS})\\b)?[\\s:\\]\\[]*', '')"


# A code position, `logger#line` (t.s.TravelServiceImpl#451), near the start of a line: the event a line stands for.
POSITION = r"[^\s#]+#[0-9]+"


def event_sql(column: str) -> str:
    """The line's code position, verbatim, or null."""
    return f"nullif(regexp_extract(left({body_sql(column)}, 200), '{POSITION}'), '')"


def mask_sql(column: str) -> str:
    expr = f"left({body_sql(column)}, {MAX_CHARS})"
    for pattern, token in MASKS:
        expr = f"regexp_replace({expr}, '{pattern}', '{token}', 'g')"
    return expr


class StoreState(PersistenceHandler):
    """Drain3 persistence in the store's `drain_state` table."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con

    def save_state(self, state: bytes) -> None:
        self.con.execute("insert or replace into drain_state values (1, ?)", [state])

    def load_state(self) -> bytes | None:
        rows = self.con.execute("select state from drain_state where id = 1").fetchall()
        return bytes(rows[0][0]) if rows else None


def _miner(con: duckdb.DuckDBPyConnection) -> TemplateMiner:
    config = TemplateMinerConfig()  # explicit: never read drain3.ini from the working directory
    config.drain_sim_th = 0.5
    config.drain_depth = 4
    config.parametrize_numeric_tokens = True
    return TemplateMiner(StoreState(con), config)


def mine_new(con: duckdb.DuckDBPyConnection, new: list[str]) -> int:
    """Give every masked message of `new` (none known yet, in the order to mine them) a template id."""
    if not new:
        return 0
    miner = _miner(con)
    handler, miner.persistence_handler = miner.persistence_handler, None  # save once, at the end
    ids = [miner.add_log_message(text)["cluster_id"] for text in new]
    miner.persistence_handler = handler
    miner.save_state("etl")
    con.from_arrow(pa.table({"masked": new, "template_id": pa.array(ids, pa.int32())})).insert_into("log_masked")
    clusters = miner.drain.clusters
    con.register("mined", pa.table({"template_id": pa.array([c.cluster_id for c in clusters], pa.int32()),
                                    "template": [c.get_template() for c in clusters]}))
    con.execute("""insert into log_templates select template_id, template, null, 0 from mined
                   on conflict (template_id) do update set template = excluded.template""")
    con.unregister("mined")
    return len(new)
