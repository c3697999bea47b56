# The PyPI torch 2.x venv the Python tests also run against (docs/pytorch.md,
# "Tests").  scripts/deps.sh pins its version, owns its path
# (FIREBREAK_TORCH2_VENV, default /opt/firebreak/torch-<version>) and
# installs it for `make test`; `make build` does not need it.  Asked again
# at every configure, so a venv that appears later is found; a cache value
# of FB_TORCH2_PYTHON (-DFB_TORCH2_PYTHON=/path/bin/python) overrides it.
#
# Sets FB_TORCH2_PYTHON (the venv's python) and FB_TORCH2_READY (the file
# whose presence means the venv is usable: tests skip with 77 without it).
if(FB_TORCH2_PYTHON)
  get_filename_component(fb_torch2_venv "${FB_TORCH2_PYTHON}" DIRECTORY)
  get_filename_component(fb_torch2_venv "${fb_torch2_venv}" DIRECTORY)
  set(FB_TORCH2_READY "${fb_torch2_venv}/.firebreak-ready")
else()
  execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/deps.sh --torch2-venv
                  OUTPUT_VARIABLE fb_torch2_venv OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE fb_torch2_rc)
  if(NOT fb_torch2_rc EQUAL 0 OR NOT fb_torch2_venv)
    message(FATAL_ERROR "scripts/deps.sh --torch2-venv failed (${fb_torch2_rc})")
  endif()
  set(FB_TORCH2_PYTHON "${fb_torch2_venv}/bin/python")
  set(FB_TORCH2_READY "${fb_torch2_venv}/.firebreak-ready")
endif()
if(NOT EXISTS "${FB_TORCH2_READY}")
  message(STATUS "torch 2 venv: ${fb_torch2_venv} not ready; its tests will skip "
                 "(make test, or scripts/deps.sh, installs it)")
endif()
