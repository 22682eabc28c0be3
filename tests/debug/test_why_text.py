"""`why`'s text, from a report's plain data: each node's ops and where in the user's code they came from."""
from mini_inductor.debug.why import short_source, why


def _report(sources_a, sources_b):
    return {"kernels": [{"name": "triton_poi_fused_relu_0", "nodes": ["buf1"], "ops": ["aten.relu.default"],
                         "sources": sources_b}],
            "externs": [{"name": "buf0", "op": "aten.addmm.default", "sources": sources_a}],
            "fused": [],
            "refused": [{"node1": "buf0", "node2": "buf1", "reason": "node1 is extern or nop", "round": 1}],
            "nodes": {"buf0": {"ops": ["aten.addmm.default"], "sources": sources_a, "reads": []},
                      "buf1": {"ops": ["aten.relu.default"], "sources": sources_b, "reads": ["buf0"]}}}


def test_a_node_placed_by_its_module_reads_in_forward_of_not_at_in_forward_of():
    text = why(_report(["in forward of Linear (model[0])"], ['File "/x/m.py", line 7, in forward: return y.relu()']),
               "buf0", "buf1")
    assert "\n      in forward of Linear (model[0])" in text and "at in forward" not in text, text
    assert "\n      at m.py:7 (forward): return y.relu()" in text, text


def test_short_source_names_the_users_function_past_a_graph_break_and_takes_a_line_without_one():
    assert short_source('File "/x/m.py", line 7, in torch_dynamo_resume_in_forward_at_5: return y.relu()') == \
        "m.py:7 (forward): return y.relu()"
    assert short_source('File "/x/m.py", line 4: print(y)') == "m.py:4: print(y)"


def test_a_refusal_is_followed_by_what_its_reason_means_in_a_users_words():
    text = why(_report(["in forward of Linear (model[0])"], []), "buf0", "buf1")
    assert text.startswith("cannot fuse buf0 with buf1: node1 is extern or nop\n  that is: the first is a library "
                           "call (a matmul, attention, an op without a lowering) or moves no data"), text


def test_the_two_no_shared_data_reasons_mean_different_things():
    from mini_inductor.debug.why import reason_meaning
    assert reason_meaning("no shared data accessed alike: each accesses buf3 in a different order (...)").startswith(
        "they access what they share in different patterns")
    assert reason_meaning("no shared data") == \
        "they access no buffer in common, so one kernel would not load or store less"
