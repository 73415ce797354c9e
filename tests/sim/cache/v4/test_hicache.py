"""The V4 cache as the engine drives it: what admission sets aside for the requests decoding stays their
remaining output, clipped, through decode passes that run a pool dry and the retractions that follow."""

from sim.app.run import run_scenario
from sim.cache.budget import output_left
from sim.cache.v4.hicache import V4HiCache
from sim.scenario.load import load_scenario

ROOT_SCENARIO = "scenarios/dsv4_flash_multiturn_l1l2.yaml"


def test_the_decode_budget_stays_the_sum_of_the_decoding_requests_outputs(monkeypatch):
    """A running total replaced a sum per admission; a decode pass that raised MemoryError (a pool ran dry,
    the request is retracted next) once took the request's output out twice, and admission over-committed."""
    checked, retracted, admit, retract = [], [], V4HiCache.admit_request, V4HiCache.retract

    def admit_checked(self, keys, input_len, output_len, chunk_limit=None):
        checked.append(self._decode_left == sum(output_left(a.run) for a in self.decoding.values()))
        return admit(self, keys, input_len, output_len, chunk_limit)

    def retract_counted(self, adm, keep_free=0):
        retracted.append(adm)
        return retract(self, adm, keep_free)

    monkeypatch.setattr(V4HiCache, "admit_request", admit_checked)
    monkeypatch.setattr(V4HiCache, "retract", retract_counted)
    run_scenario(load_scenario(ROOT_SCENARIO, ["hicache.hicache_ratio=0.5"]))
    assert retracted  # the path that ran the pools dry was taken
    assert checked and all(checked), f"{checked.count(False)} of {len(checked)} admissions saw a wrong budget"
