"""Test lanes.

* ``pytest -m gpu`` is the device lane: it cannot pass by skipping. Every
  selected test needs a usable GPU; on a machine without one each fails with
  the reason, instead of being skipped.
* Under ``CI=true`` the tests that run the CUDA kernels in Numba's simulator
  fail when the simulator is missing, instead of skipping
  (``test_gpu_backend.run_simulated``), and the test that compiles every
  kernel for sm_90 fails when NVVM is missing (``test_ptx``).
* ``pytest -m "not slow"`` is the quick lane: every test but those marked
  ``slow`` (each takes more than about 3 seconds on two cores). With
  ``python -m pytest -q -n 2 -m "not slow"`` it runs in under 3 minutes on a
  2-core machine; the whole suite (``python -m pytest -n 2``, what CI runs)
  still runs every test. A test is slow when :data:`SLOW` names it (its
  function, for all its parameters, or one parametrized case ``name[id]``),
  or when its module marks it itself (``test_one_engine``,
  ``test_accuracy_real_text``). ``test_structure`` checks that every name in
  :data:`SLOW` is a test function of its file.
* Under ``-n`` (pytest-xdist, ``--dist loadgroup`` from ``pyproject.toml``)
  the tests of a module that share a module-scoped fixture run in one worker,
  so that the fixture is computed once and not once per worker, and the
  slow tests are handed out first, so that no long test starts last while
  the other worker has nothing left to run.
* Once the tests are collected, the objects of the test process so far (the
  test modules and every library they import) are frozen out of Python's
  garbage collector: the library collects garbage after each stage of a run
  (``gpu_dedup.memory.release_memory``), and in the test process that would
  walk those hundreds of thousands of objects each time.
"""
from __future__ import annotations

import gc
import os

import pytest

#: The tests that take more than about 3 seconds on two cores, by file: the
#: function names (all their parametrized cases) or single cases ``name[id]``.
SLOW: dict[str, tuple[str, ...]] = {
    "test_backend_protocol.py": (
        "test_gpu_backend_implements_the_protocol_under_the_simulator",
    ),
    "test_bad_input.py": (
        "test_bad_input_exits_2_with_one_line_and_writes_nothing",
        "test_duplicate_ids_across_files_name_both_places",
        "test_lone_surrogate_escapes_are_replaced_and_counted",
        "test_non_empty_output_survives_without_overwrite",
        "test_output_that_is_an_input_or_inside_one",
        "test_parquet_null_text_and_missing_column",
        "test_skip_bad_records_counts_lists_and_keeps_every_valid_one",
    ),
    "test_bench_smoke.py": (
        "test_harness_reports_every_tool",
    ),
    "test_cli_help.py": (
        "test_progress_bars_per_stage_on_a_terminal_only",
    ),
    "test_cli_options.py": (
        "test_run_warns_once_too",
    ),
    "test_cookbook_tables.py": (
        "test_banding_collision_rate_follows_s_curve",
        "test_minhash_estimate_is_unbiased_and_standard_error_matches_theory",
    ),
    "test_demo.py": (
        "test_demo_default_folder_is_named",
        "test_demo_leaves_output_and_report_in_the_folder_it_names",
    ),
    "test_device_selection.py": (
        "test_cpu_run_and_import_pull_in_no_gpu_package",
        "test_device_auto_runs_on_cpu_says_so_and_matches_cpu",
    ),
    "test_distributed.py": (
        "test_dask_threads_equal_single_process",
        "test_local_cluster_of_two_processes_equals_single_process",
        "test_real_scheduler_and_two_workers_on_loopback",
    ),
    "test_doctor.py": (
        "test_simulated_doctor_exits_0_after_comparing",
        "test_gpu_check_simulated_prints_and_writes_one_table",
        "test_doctor_without_gpu_or_simulator_checks_the_cpu_and_exits_0",
    ),
    "test_gpu_backend.py": (
        "test_cuda_kernels_compile_and_hash_in_integers_only",
        "test_gpu_backend_refuses_to_run_host_arrays_outside_the_simulator",
        "test_in_the_simulator_a_block_shares_one_shared_array_even_when_threads_race",
        "test_simulator_ran_the_cuda_kernels",
        "test_simulated_kernels_match_cpu_kernels",
        "test_simulated_backend_runs_match_cpu_runs",
        "test_text_goes_to_the_device_once_or_streams_within_budget",
    ),
    "test_gpu_lane.py": (
        "test_in_the_simulator_every_mode_gives_the_cpu_bytes",
        "test_in_the_simulator_greedy_selection_runs_on_the_device_and_equals_the_cpu",
        "test_in_the_simulator_normalization_runs_on_the_device_for_ascii_documents",
        "test_in_the_simulator_split_bucketing_merges_on_the_device_when_it_fits",
    ),
    "test_greedy.py": (
        "test_parallel_rounds_equal_the_sequential_passes_bit_for_bit",
        "test_rounds_equal_the_sequential_rule_on_random_graphs[0]",
    ),
    "test_hostile.py": (
        "test_hostile[empty file]",
        "test_hostile[stdin empty]",
        "test_hostile[input name with an undecodable byte]",
        "test_hostile[output name with an undecodable byte]",
        "test_hostile[a good run]",
        "test_hostile[substr on an empty file]",
        "test_hostile[doctor]",
    ),
    "test_hostile_cli.py": (
        "test_a_secret_in_options_and_a_url_like_input_name_are_not_saved",
        "test_a_url_with_credentials_is_never_shown",
        "test_generated_ids_do_not_carry_credentials",
        "test_doctor_cli_exits_0_without_gpu",
    ),
    "test_hostile_engine.py": (
        "test_a_damaged_file_read_by_the_next_stages_is_recomputed",
        "test_a_damaged_marker_is_recomputed_to_the_same_outputs",
        "test_a_damaged_work_file_is_recomputed_to_the_same_outputs",
        "test_a_damaged_work_file_on_object_storage_is_recomputed",
        "test_a_local_cluster_run_with_q_prints_nothing",
        "test_a_server_that_is_no_dask_scheduler_is_one_line",
        "test_many_damaged_files_at_once",
        "test_nothing_listening_or_no_such_host_is_one_line",
        "test_the_repaired_work_directory_is_trusted_again",
        "test_leftover_temporary_files_of_every_writer_are_removed",
        "test_a_malformed_scheduler_address_is_one_line[tcp://notahost:abc]",
    ),
    "test_hostile_index.py": (
        "test_a_damaged_index_stops_every_query_naming_the_file",
        "test_a_remote_index_changed_under_a_writer_stops_it",
        "test_an_empty_text_added_twice_under_one_id_is_indexed_once",
        "test_an_id_already_indexed_with_another_text_is_refused",
        "test_an_id_already_indexed_with_its_own_text_is_already_indexed",
        "test_an_undamaged_index_answers_every_query",
        "test_two_adds_at_once_leave_what_one_after_the_other_leaves",
        "test_two_adds_at_once_to_a_remote_index_run_one_after_the_other",
        "test_two_builds_of_one_folder_at_once_build_it_once",
    ),
    "test_hostile_io.py": (
        "test_a_data_file_linked_outside_the_folder_is_refused",
        "test_a_file_name_with_an_undecodable_byte_runs_and_is_named_printably",
        "test_a_sound_datasets_folder_in_subfolders_still_runs",
        "test_a_state_json_naming_an_absolute_path_is_refused",
        "test_a_text_nested_1000_deep_is_called_an_array",
        "test_a_text_nested_20000_deep_is_one_line_naming_file_and_line",
        "test_credentials_in_an_input_url_never_reach_the_output",
        "test_generated_ids_and_other_formats_with_an_undecodable_name",
        "test_metadata_linked_outside_the_folder_is_refused",
        "test_special_files_inside_input_folders_are_refused",
        "test_stdin_still_reads",
    ),
    "test_hostile_output.py": (
        "test_a_publish_killed_half_way_is_incomplete_and_the_next_overwrite_replaces_it",
        "test_output_complete_checks_every_listed_file",
        "test_overwrite_refuses_a_users_file_added_to_an_earlier_output",
        "test_overwrite_refuses_an_output_file_the_user_changed",
        "test_overwrite_removes_exactly_the_files_of_the_earlier_output",
        "test_s3_overwrite_never_deletes_a_users_object",
        "test_s3_staging_prefixes_of_killed_runs_are_removed_by_the_next_run",
    ),
    "test_index.py": (
        "test_a_missing_or_corrupt_index_file_is_named",
        "test_add_is_the_same_as_a_build_of_both_and_adds_nothing_twice",
        "test_an_index_of_other_options_is_refused_naming_the_option",
        "test_an_index_written_in_small_batches_answers_the_same",
        "test_incremental_equals_whole_on_real_text",
        "test_kill_during_a_query_leaves_no_output_and_the_index_as_it_was",
        "test_kill_during_add_leaves_the_index_whole",
        "test_kill_during_build_leaves_no_index_or_a_whole_one",
        "test_overlap_flags_near_copies_and_passages_not_unrelated_text",
    ),
    "test_index_layering.py": (
        "test_dependencies_point_one_way",
        "test_keys_of_and_window_keys_run_on_the_backend_given",
    ),
    "test_io_arrow.py": (
        "test_a_corrupt_arrow_file_is_one_line_naming_it",
        "test_a_dataset_dict_folder_is_one_shard_per_split",
        "test_a_datasets_folder_gives_the_jsonl_clusters_and_a_loadable_data_folder",
        "test_arrow_ipc_files_give_the_jsonl_clusters_and_data_in_their_own_format",
        "test_large_arrow_shards_are_read_in_record_batches_with_the_same_bytes",
        "test_stray_json_metadata_is_never_a_shard",
        "test_substr_over_a_datasets_folder_and_feather_cuts_the_same_texts",
    ),
    "test_io_formats.py": (
        "test_every_format_gives_identical_clusters",
        "test_hugging_face_layout_directory_and_globs",
        "test_text_directory_one_document_per_file",
        "test_data_holds_exactly_the_kept_rows",
    ),
    "test_kernel_layout.py": (
        "test_the_cpu_path_imports_no_gpu_package",
    ),
    "test_memory.py": (
        "test_peak_monitor_catches_a_spike_per_stage",
        "test_staged_run_stays_within_its_budget",
    ),
    "test_output_dir.py": (
        "test_two_processes_into_one_empty_dir_exactly_one_publishes",
    ),
    "test_presets.py": (
        "test_config_show_round_trips_through_a_file",
        "test_each_preset_runs",
    ),
    "test_ptx.py": (
        "test_every_kernel_is_launched_and_compiles_for_sm_90",
    ),
    "test_removals_cli.py": (
        "test_a_second_run_over_data_removes_nothing",
    ),
    "test_report_html.py": (
        "test_page_loads_in_headless_chromium_and_is_not_blank",
    ),
    "test_resume.py": (
        "test_completed_stages_are_reused_and_changes_are_not",
        "test_killed_mid_stage_resumes_with_identical_outputs",
        "test_sigkill_from_outside_after_a_stage_marker",
    ),
    "test_run_contract.py": (
        "test_bad_input_exits_2_naming_file_and_line",
        "test_invalid_utf8_is_replaced_and_counted",
        "test_outputs_account_for_every_document",
        "test_parquet_input_and_generated_ids",
        "test_refuses_non_empty_output_and_never_writes_into_inputs",
        "test_same_command_gives_byte_identical_outputs",
    ),
    "test_run_edges.py": (
        "test_full_disk_exits_2_with_one_line_on_the_command_line",
        "test_full_disk_in_the_work_directory",
        "test_standard_input",
        "test_compressed_data_under_a_plain_jsonl_name",
        "test_parquet_string_columns_of_every_kind[dictionary]",
    ),
    "test_s3.py": (
        "test_a_run_killed_midway_with_its_work_on_s3_resumes_to_the_same_bytes",
        "test_a_run_over_an_s3_prefix_to_another_gives_the_local_bytes",
        "test_an_incomplete_output_says_so_and_a_users_object_is_never_deleted",
        "test_an_index_on_s3_builds_adds_and_deduplicates_like_a_local_one",
        "test_bad_credentials_a_missing_bucket_and_key_are_one_line_without_the_secret",
        "test_out_of_core_with_the_work_directory_on_s3",
        "test_storage_options_from_the_command_line_or_a_preset_table",
        "test_substr_from_s3_to_s3_gives_the_local_bytes",
    ),
    "test_s3server.py": (
        "test_multipart_sized_object_roundtrips",
    ),
    "test_staged.py": (
        "test_configurations",
        "test_default_budget_equals_in_memory_run",
        "test_engine_agrees_on_a_single_array",
        "test_overwrite_replaces_the_output",
        "test_result_does_not_depend_on_the_budget",
        "test_small_memory_limit_gives_the_same_result",
        "test_refuses_non_empty_output_and_bad_options",
    ),
    "test_substr.py": (
        "test_a_sentence_planted_in_ten_thousand_documents_is_cut_from_all_but_the_first",
        "test_bad_options_and_an_empty_corpus",
        "test_equals_the_definition_on_real_text[first-char-200]",
        "test_equals_the_definition_on_real_text[none-char-200]",
        "test_near_duplicates_then_repeated_passages",
        "test_the_command_writes_spans_documents_data_and_reports",
    ),
    "test_compile_notice.py": (
        "test_the_first_run_says_it_compiles_and_the_next_does_not",
    ),
    "test_semantic_run.py": (
        "test_every_way_of_running_writes_the_same_bytes",
        "test_removals_are_justified_and_planted_copies_found",
    ),
    "test_substr_engine.py": (
        "test_a_kill_mid_stage_resumes_to_the_same_bytes",
        "test_a_memory_limit_puts_the_run_on_disk_with_the_same_bytes",
        "test_out_of_core_and_on_dask_the_outputs_are_the_same_bytes",
        "test_the_simulated_gpu_gives_the_cpu_result_bit_for_bit",
    ),
    "test_tune.py": (
        "test_cli_json_and_bad_arguments",
        "test_cli_prints_table_and_writes_png",
    ),
}


def slow_keys(item) -> tuple[str, ...]:
    """The names under which :data:`SLOW` may list a test."""
    base = getattr(item, "originalname", item.name)
    return (base, item.name)


def _mark_slow(items) -> None:
    for item in items:
        listed = SLOW.get(item.path.name)
        if listed is not None and any(k in listed for k in slow_keys(item)):
            item.add_marker(pytest.mark.slow)


def _gpu_lane(config) -> bool:
    expr = (config.getoption("-m", default="") or "").replace("(", " ").replace(")", " ")
    words = expr.split()
    return "gpu" in words and not any(a == "not" and b == "gpu"
                                      for a, b in zip(words, words[1:]))


def _share_module_fixtures(items) -> None:
    """Put each test that uses a module-scoped fixture in its module's
    ``xdist_group``: one worker computes the fixture, once."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is not None and any(defs and defs[-1].scope == "module"
                                    for defs in info.name2fixturedefs.values()):
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def _slow_first(items) -> None:
    """In an xdist worker, the slow tests first (the order of the rest kept)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(tryfirst=True)      # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    _mark_slow(items)
    _share_module_fixtures(items)
    _slow_first(items)
    if not _gpu_lane(config):
        return
    from gpu_dedup.backend_gpu import probe
    usable, why = probe()
    if usable:
        return
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        # a skip because there is no GPU would pass the lane: make it fail instead
        item.own_markers = [m for m in item.own_markers if m.name not in ("skip", "skipif")]
        item.add_marker(pytest.mark.usefixtures("_no_gpu_fails"))
        item.user_properties.append(("gpu_lane_failure", why))


def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()


@pytest.fixture
def _no_gpu_fails(request):
    why = dict(request.node.user_properties).get("gpu_lane_failure", "no usable GPU")
    pytest.fail(f"the gpu lane needs a usable GPU: {why}", pytrace=False)
