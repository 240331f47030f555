"""Cache guards on hand-written pairs: each refuses its near-miss and accepts honest rewording.

None of these pairs comes from the development evaluation set.
"""

from __future__ import annotations

from importlib.resources import files

import pytest

from evermind.cache import DEFAULT_GUARDS, GuardChain, default_guard, explain
from evermind.cache.english.lexicon import DATA_FILES, load
from evermind.cache.guard import Guard
from evermind.errors import ConfigError

GUARDS = {guard.name: guard for guard in DEFAULT_GUARDS}


def refuses(name: str, query: str, cached: str) -> None:
    """The named guard refuses in both directions, and so does the whole chain."""
    guard = GUARDS[name]
    assert guard.check(query, cached) is not None, f"{name} accepted {query!r} vs {cached!r}"
    assert guard.check(cached, query) is not None, f"{name} accepted {cached!r} vs {query!r}"
    assert not default_guard(query, cached)
    assert not default_guard(cached, query)


def accepts(query: str, cached: str) -> None:
    """Every guard accepts in both directions."""
    for direction in ((query, cached), (cached, query)):
        refusal = explain(*direction)
        assert refusal is None, f"refused {direction}: {refusal}"
        assert default_guard(*direction)


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Set the connection pool size to 20", "Set the connection pool size to 50"),
        ("Is a 700 credit score good?", "Is a 640 credit score good?"),
        ("Bake the bread for 25 minutes", "Bake the bread for 40 minutes"),
        ("Budget of £48,000 for the project", "Budget of £84,000 for the project"),
    ],
)
def test_number_guard_refuses_changed_quantities(query: str, cached: str) -> None:
    refuses("number", query, cached)


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Which plan suits a team of 40?", "Which plan suits a team?"),
        ("Can I pay my rent with a card?", "Can I pay my rent with a card charging a 3% fee?"),
        ("How long do I roast a chicken?", "How long do I roast a 2 kg chicken?"),
    ],
)
def test_number_guard_refuses_a_quantity_only_one_query_names(query: str, cached: str) -> None:
    refuses("number", query, cached)
    assert "only" in (GUARDS["number"].check(query, cached) or "")


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Book a table for twelve people tonight", "Reserve a table for 12 guests tonight"),
        ("Is ninety seconds enough to preheat the pan?", "Is 90 seconds enough to preheat a pan?"),
        (
            "Salary of forty-eight thousand pounds after tax",
            "£48,000 salary: what is left after tax",
        ),
        (
            "Does the ten percent discount apply online?",
            "Is the 10% discount valid on the website?",
        ),
        ("The film runs an hour and a half", "Is the movie 90 minutes long?"),
        ("Back up the database four times an hour", "Schedule a database backup every 15 minutes"),
        ("Cancel within the two-week trial", "Can I cancel during the 14-day trial period?"),
        ("Is 2.5 km a long walk for a child?", "Is a 2500 m walk too far for a kid?"),
    ],
)
def test_number_guard_accepts_rewritten_numbers(query: str, cached: str) -> None:
    assert GUARDS["number"].check(query, cached) is None
    assert GUARDS["number"].check(cached, query) is None
    assert GUARDS["unit"].check(query, cached) is None


def test_unit_guard_refuses_same_number_other_unit() -> None:
    refuses("unit", "Resize the volume to 200 GB", "Resize the volume to 200 MB")
    refuses("unit", "Height of Ben Nevis in feet", "Height of Ben Nevis in metres")
    refuses("unit", "Can I check a bag of 23 kg?", "Can I check a bag of 23 lb?")


def test_unit_guard_accepts_converted_units() -> None:
    accepts("Resize the disk to 2 GB", "Resize the disk to 2000 MB")
    assert GUARDS["unit"].check("Height of Ben Nevis in meters", "Ben Nevis height, metres") is None
    assert GUARDS["number"].check("Oven at 180 degrees Celsius", "Oven at 180°C") is None


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Which fruits are safe for dogs to eat?", "Which fruits are not safe for dogs to eat?"),
        ("Start the dev server without TLS", "Start the dev server with TLS"),
        ("Is this plugin compatible with Firefox?", "Is this plugin incompatible with Firefox?"),
        ("Hiking trails that allow dogs", "Hiking trails that never allow dogs"),
    ],
)
def test_negation_guard_refuses_flipped_polarity(query: str, cached: str) -> None:
    refuses("negation", query, cached)


def test_negation_guard_accepts_same_polarity_reworded() -> None:
    accepts("Why doesn't my printer connect to wifi?", "Why does my printer not connect to wifi?")
    accepts("Run the nightly job without logging", "Run the nightly job but skip logging")


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        (
            "Translate this sentence from French to German",
            "Translate this sentence from German to French",
        ),
        ("Sort the table in ascending order", "Sort the table in descending order"),
        ("Export contacts to a CSV file", "Import contacts from a CSV file"),
        (
            "Can I take ibuprofen after drinking coffee?",
            "Can I drink coffee after taking ibuprofen?",
        ),
        ("Which city has the highest rent in Spain?", "Which city has the lowest rent in Spain?"),
    ],
)
def test_direction_guard_refuses_reversed_direction(query: str, cached: str) -> None:
    refuses("direction", query, cached)


def test_direction_guard_accepts_reordered_but_same_roles() -> None:
    accepts("Cheapest flight from Berlin to Rome", "Lowest fare to Rome from Berlin")


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("How do I enable dark mode in Slack?", "How do I disable dark mode in Slack?"),
        ("Encrypt a file with gpg", "Decrypt a file with gpg"),
        ("Compute the mean of 4, 8 and 15", "Compute the median of 4, 8 and 15"),
        ("How do I lock a cell in Excel?", "How do I unlock a cell in Excel?"),
    ],
)
def test_operation_guard_refuses_contrasting_operations(query: str, cached: str) -> None:
    refuses("operation", query, cached)


def test_operation_guard_accepts_synonymous_operations() -> None:
    accepts("How do I delete a Docker volume?", "How do I remove a Docker volume?")


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        # the gateway replay's wrong answer with the model-free terms embedder
        ("Credit cards with no foreign transaction fees", "Update the credit card on file"),
        (
            "git push fails because my branch is behind its remote",
            "How to delete a remote git branch",
        ),
    ],
)
def test_action_guard_refuses_an_operation_asked_in_one_query_only(query: str, cached: str) -> None:
    refusal = explain(query, cached)
    assert refusal is not None and refusal.guard == "action", refusal
    assert refusal.unless_confident is not None  # soft: a confident embedder may override it


def test_action_guard_accepts_two_requests_or_none() -> None:
    accepts("Change the payment card saved to my account", "Update the credit card on file")
    accepts("Cards without fees abroad", "Credit cards with no foreign transaction fees")


def test_a_soft_refusal_yields_to_a_confident_score_and_a_veto_never_does() -> None:
    from evermind.cache.decide import Candidate, decide
    from evermind.search.calibration import Calibration

    query, cached = "Put my Linux account into the docker group", "Add a user to the docker group"
    calibration = Calibration(threshold=0.4, unrelated=0.37, pairs=100)

    def at(score: float) -> str | None:
        candidate = Candidate("k", score, cached, "answer")
        decision = decide(
            query,
            [candidate],
            threshold=None,
            calibration=calibration,
            guard=explain,
            lexical=False,
        )
        return decision.refused_by

    assert at(0.5) == "action"  # 0.17 of the way from 0.4 to 1.0: below ACTION_CONFIDENT
    assert at(0.9) is None  # 0.83 of the way: the embedder is trusted
    veto = ("How do I enable dark mode?", "How do I disable dark mode?")
    vetoed = decide(
        veto[0],
        [Candidate("k", 0.99, veto[1], "a")],
        threshold=None,
        calibration=calibration,
        guard=explain,
        lexical=False,
    )
    assert vetoed.refused_by == "operation"


def test_soft_guards_run_after_every_veto() -> None:
    assert DEFAULT_GUARDS[-1].name == "action"
    assert GuardChain(reversed(DEFAULT_GUARDS)).names[-1] == "action"


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("How do I install Flask on Windows?", "How do I install Django on Windows?"),
        ("Best ramen shops in Osaka", "Best ramen shops in Kyoto"),
    ],
)
def test_entity_guard_refuses_other_entities(query: str, cached: str) -> None:
    refuses("entity", query, cached)


@pytest.mark.parametrize(
    ("query", "cached"),
    [
        ("Kubernetes ingress timeout setting", "k8s ingress timeout setting"),
        ("Best sushi restaurants in Los Angeles", "Best sushi restaurants in LA"),
        (
            "Visa rules for Swedish citizens visiting Brazil",
            "Visa rules for citizens of Sweden visiting Brazil",
        ),
        (
            "Turn on 2FA for my GitLab account",
            "Turn on two-factor authentication for my GitLab account",
        ),
    ],
)
def test_entity_guard_accepts_aliases_and_acronyms(query: str, cached: str) -> None:
    assert GUARDS["entity"].check(query, cached) is None
    assert GUARDS["entity"].check(cached, query) is None


def test_error_code_guard() -> None:
    refuses(
        "error_code", "Fix pylint error E1101 in my model", "Fix pylint error E1120 in my model"
    )
    refuses(
        "error_code",
        "Pod status ErrImagePull after deploy",
        "Pod status CreateContainerConfigError after deploy",
    )
    accepts(
        "What does ERR_SSL_PROTOCOL_ERROR mean in Chrome?",
        "Chrome shows err ssl protocol error, what does it mean?",
    )
    assert (
        GUARDS["error_code"].check("TS7006 in my React props", "tsc error 7006 in my React props")
        is None
    )


def test_error_code_guard_refuses_different_messages_after_same_prefix() -> None:
    refuses(
        "error_code",
        "cargo build: error: linker cc not found",
        "cargo build: error: could not compile serde due to previous errors",
    )


def test_version_guard() -> None:
    refuses("version", "What's new in Kotlin 2.0?", "What's new in Kotlin 1.9?")
    refuses(
        "version", "Migrate the client from API v1 to v2", "Migrate the client from API v2 to v3"
    )
    assert GUARDS["version"].check("Release notes for Vue 3.4", "Vue release 3.4 notes") is None


def test_date_guard() -> None:
    refuses("date", "Is the museum open on Mondays?", "Is the museum open on Tuesdays?")
    refuses("date", "Fireworks on July 4 in Boston", "Fireworks on July 14 in Boston")
    refuses("date", "Team call at 7 pm", "Team call at 7 am")
    accepts("Is the office closed on 25 December?", "Is the office closed on Christmas Day?")
    accepts("Team call at 7 pm", "Team call at 19:00")
    assert GUARDS["date"].check("Gym hours Monday through Friday", "Gym hours on weekdays") is None


def test_edit_guard_refuses_one_word_substitution() -> None:
    refuses("edit", "Best hiking boots for wide feet", "Best hiking boots for flat feet")


def test_edit_guard_refuses_one_frame_with_a_longer_span_swapped() -> None:
    # Word for word the same question except one span: a different thing, whatever its size.
    refuses("edit", "Healing time after a knee arthroscopy", "Healing time after laser eye surgery")
    refuses(
        "edit",
        "Move my old pension pot into a self-invested plan",
        "Move my old pension pot into my partner's workplace scheme",
    )
    # Rewording in more than one place is not one swapped span: left to the other guards.
    accepts(
        "Healing time after a knee arthroscopy",
        "How long does it take to heal after knee arthroscopy?",
    )


def test_edit_guard_accepts_filler_words() -> None:
    accepts("How can I quickly resize an image in GIMP?", "How do I resize an image in GIMP?")


def test_paraphrases_pass_the_whole_chain() -> None:
    accepts("What is the boiling point of ethanol?", "At what temperature does ethanol boil?")
    accepts("How many people live in Peru?", "What is the population of Peru?")


def test_chain_reports_the_refusing_guard_and_can_drop_guards() -> None:
    refusal = explain("Encrypt a file with gpg", "Decrypt a file with gpg")
    assert refusal is not None and refusal.guard == "operation"
    assert "encrypt" in refusal.reason or "decrypt" in refusal.reason
    relaxed = GuardChain(DEFAULT_GUARDS).without("operation", "edit")
    assert relaxed("Encrypt a file with gpg", "Decrypt a file with gpg")
    assert "operation" not in relaxed.names


def test_custom_guard_plugs_in() -> None:
    class NoSwearing:
        name = "language"

        def check(self, query: str, cached_query: str) -> str | None:
            return "rude" if "darn" in query else None

    custom = NoSwearing()
    assert isinstance(custom, Guard)
    chain = GuardChain([custom, *DEFAULT_GUARDS])
    refusal = chain.check("darn printer offline", "printer offline")
    assert refusal is not None and refusal.guard == "language"
    assert chain("printer is offline", "printer offline")


def test_duplicate_guard_names_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unique guard names"):
        GuardChain([GUARDS["number"], GUARDS["number"]])


def test_default_guard_accepts_the_evaluator_signature() -> None:
    assert default_guard(
        "How do I remove a Docker volume?", "How do I delete a Docker volume?", 0.93
    )


def test_english_word_lists_load_from_the_package_resources() -> None:
    shipped = {p.name for p in (files("evermind.cache.english") / "data").iterdir()}
    assert shipped == {f"{name}.json" for name in DATA_FILES}
    for name in DATA_FILES:
        data = dict(load(name))
        assert data.pop("about", None), f"{name}.json says what it holds"
        for key, words in data.items():
            assert words, f"{name}.json: {key} is empty"
