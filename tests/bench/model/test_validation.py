"""The model's prediction of this machine's default `moerl up` iteration time is within the
stated error of each stored measured reference (bench/model/reference/<sitting>/)."""

import validate


def test_every_sitting_is_predicted_within_the_stated_error():
    out = validate.validate()
    assert len(out["sittings"]) >= 3
    for row in out["sittings"]:
        assert row["measured"]["iterations"] >= 100
        assert validate.within(row), row


def test_the_prediction_reads_the_sittings_benchmarks():
    import calibrate
    inputs = calibrate.load_inputs()
    spec = inputs["box_train_step_s"]["bench"]
    files = calibrate.bench_files("box_train_step_s", spec)
    assert len(files) == len(validate.sittings())
    assert validate.predict()["inputs"]["box_train_step_s"] == inputs["box_train_step_s"]["value"]
