# LLM inference latency course: build, run and test.
#
# Two commands are all a learner needs:
#     make lab     set up the environment and open JupyterLab on notebooks/00_start_here.ipynb
#     make test    set up the environment and run the whole test suite (unit tests + notebooks)
#
# Works on a fresh machine with only python3 and make (as a normal user or as root).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.course-installed

# pytest-xdist workers: the number of CPUs, capped at 2 (the suite is sized for 2 cores).
NPROC   := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
WORKERS ?= $(shell n=$(NPROC); if [ "$$n" -gt 2 ]; then n=2; fi; if [ "$$n" -lt 1 ]; then n=1; fi; echo $$n)

# Notebooks that carry stored outputs and are checked cell by cell by nbval.
NB_DIRS := $(wildcard notebooks solutions app)

# JupyterLab refuses to run as root unless told to.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

PYTEST_ARGS ?=

.PHONY: help install llamacpp lab lab-instructor app test tour site notebooks exercises codegen clean

help:
	@echo "make lab         install (if needed), copy exercises/ into work/, start JupyterLab"
	@echo "make lab-instructor  the same JupyterLab with nbgrader's instructor tools (menu, Validate, Create Assignment)"
	@echo "make app         install (if needed), serve the capstone dashboard (Voila) on http://$(IP):$(PORT)/"
	@echo "make test        install (if needed), run unit tests and validate every notebook (nbval)"
	@echo "make tour        the slower integration checks: real-browser runs of JupyterLab and Voila, nbgrader autograde,"
	@echo "                 a JupyterHub classroom (tests/test_hub.py), the Binder environment (tests/test_binder.py)"
	@echo "make site        the course as a static HTML book in build/site/html (lessons, exercises, glossary, guide)"
	@echo "make install     create $(VENV) and install the course with its test, classroom and engines extras"
	@echo "make llamacpp    add llama.cpp (llama-cpp-python, compiled once: about 11 min; lesson 08's engine)"
	@echo "make notebooks   re-execute notebooks/ and solutions/ and save them canonically"
	@echo "                 (or only some: make notebooks NOTEBOOKS='notebooks/03_kv_cache.ipynb')"
	@echo "make exercises   regenerate exercises/ from solutions/"
	@echo "make codegen     regenerate code derived from the formulas"
	@echo "make clean       remove caches and build products (never touches work/)"

# --- environment --------------------------------------------------------------------------

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when pyproject.toml or the lock (constraints.txt) changed.
$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP) install --upgrade pip || echo "warning: could not upgrade pip; continuing with $$($(PIP) --version)"
	$(PIP) install -c constraints.txt -e '.[test,classroom,engines]'
	@touch $@

install: $(STAMP)

# llama.cpp (lesson 08's "your engine", `python -m course_lib.measure.validate --engine llama.cpp`): llama-cpp-python
# compiles llama.cpp from source (about 11 minutes on 2 cores), so `make lab` leaves it out. `make llamacpp`
# builds its wheel once into LLAMACPP_WHEELS and installs the `llamacpp` extra from there afterwards. The build
# is for any x86-64 CPU with AVX2 (GGML_NATIVE=OFF: not tuned to the building machine, so the wheel runs on
# another); on other CPUs llama.cpp's CMake ignores the x86 options.
LLAMACPP_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' constraints.txt)
LLAMACPP_WHEELS ?= $(HOME)/.cache/course_lib/wheels
LLAMACPP_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF

llamacpp: install
	@mkdir -p "$(LLAMACPP_WHEELS)"
	@if ls "$(LLAMACPP_WHEELS)"/llama_cpp_python-$(LLAMACPP_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "llama-cpp-python $(LLAMACPP_VERSION): cached wheel in $(LLAMACPP_WHEELS)"; \
	else \
	  echo "building llama-cpp-python $(LLAMACPP_VERSION) from source (about 11 minutes on 2 cores)"; \
	  CMAKE_ARGS="$(LLAMACPP_CMAKE_ARGS)" $(PIP) wheel --no-deps -w "$(LLAMACPP_WHEELS)" \
	    llama-cpp-python==$(LLAMACPP_VERSION); \
	fi
	$(PIP) install -c constraints.txt --find-links "$(LLAMACPP_WHEELS)" -e '.[llamacpp]'

# --- learner ------------------------------------------------------------------------------

# A learner's lab shows the course and none of the instructor's tools: for `make lab` alone,
# jupyter/learner/ joins Jupyter's config path and turns nbgrader's lab and server extensions and
# JupyterLab's "get notified about official Jupyter news?" prompt off (the venv's own Jupyter
# config is untouched). `make lab-instructor` starts the same lab with nbgrader on.
# tests/test_browser_lab.py reads this command with `make -n lab` and starts its lab the same way.
# The contents manager (course_lib/authoring/lab_contents.py) serves notebooks with the kernel's Python version in
# their language_info, which the canonical stored form leaves out: otherwise JupyterLab fills it in on open and
# every lesson tab shows the unsaved marker at once. Files on disk are untouched.
lab: LAB_ENV := JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter/learner"
lab-instructor: LAB_ENV :=

lab lab-instructor: install
	@mkdir -p work
	@shopt -s nullglob; \
	for src in exercises/*.ipynb; do \
	  dest="work/$$(basename "$$src")"; \
	  if [ -e "$$dest" ]; then \
	    echo "kept    $$dest (your copy is never overwritten)"; \
	  else \
	    cp "$$src" "$$dest" && echo "copied  $$src -> $$dest"; \
	  fi; \
	done
	$(LAB_ENV) $(VENV)/bin/jupyter lab $(ALLOW_ROOT) --ServerApp.root_dir="$(CURDIR)" \
	  --ServerApp.contents_manager_class=course_lib.authoring.lab_contents.CourseContentsManager notebooks/00_start_here.ipynb

# App mode: app/dashboard.ipynb served by Voila as a web page of outputs and widgets, no code
# (app/voila.json: strip_sources and friends). Voila runs in app/ so that it reads that file.
# --template=course is app/share/jupyter/voila/templates/course (Voila finds templates on JUPYTER_PATH):
# Voila's lab template without its CDN stylesheets, so that the app loads nothing from the internet.
# Voila, unlike JupyterLab, needs no --allow-root. Listens on 127.0.0.1 unless told otherwise:
#     make app PORT=8867            another port
#     make app IP=0.0.0.0           reachable from other machines (no password: Voila runs no code
#                                   sent by the page, but anyone who reaches the port can use the app)
#     make app VOILA_ARGS=--no-browser
PORT       ?= 8866
IP         ?= 127.0.0.1
VOILA_ARGS ?=

app: install
	cd app && JUPYTER_PATH="$(CURDIR)/app/share/jupyter$${JUPYTER_PATH:+:$$JUPYTER_PATH}" \
	  "$(CURDIR)/$(VENV)/bin/voila" dashboard.ipynb --template=course --Voila.ip=$(IP) --Voila.port=$(PORT) $(VOILA_ARGS)

# --- checks -------------------------------------------------------------------------------

# ruff first (seconds; configured in pyproject.toml). One xdist worker receives all cells of a
# notebook, in order (--dist loadfile groups by file), so each notebook runs top to bottom in a
# single kernel. The kernels' environment (COURSE_FAST=1 shrinks measurement loops, as when the
# stored outputs were made by `make notebooks`) and nbval's per-cell timeout come from
# course_lib/authoring/kernel.py, through tests/conftest.py.
# The slower integration checks (a real browser driving JupyterLab and Voila, nbgrader's whole autograde
# flow, a JupyterHub classroom with two students and an instructor, the Binder environment resolved by pip, the GPU
# session's dry run on the CPU: lessons 05-08 recorded, validate and the GPU engine benchmark on tiny models)
# are `make tour`, outside the suite's five minutes; .ci/run runs it after the suite with its own budget.
TOUR_MARKERS := browser or nbgrader or classroom or binder or site or gpu or grading

test: install
	$(VENV)/bin/ruff check .
	COURSE_FAST=1 $(PY) -m pytest -n $(WORKERS) --dist loadfile --durations=15 -m "not ($(TOUR_MARKERS))" \
	  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  $(PYTEST_ARGS) tests $(NB_DIRS)

tour: install
	COURSE_FAST=1 $(PY) -m pytest --durations=10 -m "$(TOUR_MARKERS)" $(PYTEST_ARGS) tests

# --- the course site --------------------------------------------------------------------------

# `make site`: every lesson, exercise set, the glossary and the instructors' guide as a static HTML book
# (Jupyter Book 1.x, the `site` extra) in build/site/html, from the stored notebooks: nothing is executed,
# nothing is fetched when a page is viewed (MathJax 3 comes from npm, pinned, into the site; `npm pack`
# fetches it once into build/site/cache). The build ends with a check of every link and asset
# (course_lib/authoring/site.py); tests/test_site.py (`make tour`) opens it in a browser.
# SITE_REPO_URL=https://github.com/OWNER/NAME makes each page's Binder link open that repository.
SITE_STAMP := $(VENV)/.course-site-installed

$(SITE_STAMP): pyproject.toml constraints.txt | $(STAMP)
	$(PIP) install -c constraints.txt -e '.[test,classroom,engines,site]'
	@touch $@

site: $(SITE_STAMP)
	$(PY) -m course_lib.authoring.site build $(if $(SITE_REPO_URL),--repo-url "$(SITE_REPO_URL)",)

# --- authoring ----------------------------------------------------------------------------

NOTEBOOKS ?=

notebooks: install
	$(PY) -m course_lib.authoring.run_notebooks $(if $(FULL),--full --record tests/fixtures/recordings/stored,) $(NOTEBOOKS)

exercises: install
	$(PY) -m course_lib.authoring.exgen

codegen: install
	$(PY) -m course_lib.core.codegen

clean:
	rm -rf .pytest_cache .hypothesis artifacts build dist
	find . \( -path ./work -o -path ./$(VENV) -o -path ./.git -o -path ./shared \) -prune -o \
	  \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -print0 | xargs -0 -r rm -rf
