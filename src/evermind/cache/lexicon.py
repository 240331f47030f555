"""Word lists behind the cache guards: numbers, units, negators, contrast sets, aliases.

This module owns every list the guards consult, so that each can be read, reviewed and
extended in one place. The lists are general English and general technical vocabulary
(antonym pairs, unit names, common abbreviations); none is taken from an evaluation set.
Words are stored folded (lower-case, no accents). Entries of contrast sets and synonym
groups are run through :func:`evermind.cache.normalize.stem` when the guards load them, so
"deleting" meets "delete" and "largest" meets "largest".

Browser-safe: standard library only.
"""

from __future__ import annotations

import math


def _words(text: str) -> list[str]:
    """Splits a whitespace-separated word list (keeps the long lists readable)."""
    return text.split()


# --------------------------------------------------------------------------- numbers

NUMBER_WORDS: dict[str, float] = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twice": 2,
    "thrice": 3,
    "half": 0.5,
    "quarter": 0.25,
}
TENS_WORDS: dict[str, float] = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
NUMBER_MULTIPLIERS: dict[str, float] = {
    "hundred": 100,
    "thousand": 1e3,
    "million": 1e6,
    "billion": 1e9,
    "trillion": 1e12,
    "dozen": 12,
}
_ORDINALS = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
]
# Ordinals, and their plurals read as fractions' denominators ("seven thirteenths").
# "seconds" is left out: it is the unit far more often than the fraction.
ORDINAL_WORDS: dict[str, float] = {w: float(i + 1) for i, w in enumerate(_ORDINALS)}
ORDINAL_WORDS.update({w + "s": float(i + 1) for i, w in enumerate(_ORDINALS) if w != "second"})
ORDINAL_WORDS["thirds"] = 3.0
ORDINAL_WORDS["halves"] = 2.0

MONTHS: dict[str, int] = {
    "january": 1,
    "jan": 1,
    "february": 2,
    "feb": 2,
    "march": 3,
    "april": 4,
    "apr": 4,
    "june": 6,
    "jun": 6,
    "july": 7,
    "jul": 7,
    "august": 8,
    "aug": 8,
    "september": 9,
    "sep": 9,
    "sept": 9,
    "october": 10,
    "oct": 10,
    "november": 11,
    "nov": 11,
    "december": 12,
    "dec": 12,
}  # "may" and "mar" are left out: far more often a verb than a month
HOLIDAYS: dict[str, tuple[int, int]] = {
    "christmas eve": (12, 24),
    "christmas day": (12, 25),
    "christmas": (12, 25),
    "boxing day": (12, 26),
    "new year's eve": (12, 31),
    "new years eve": (12, 31),
    "new year's day": (1, 1),
    "new years day": (1, 1),
    "halloween": (10, 31),
    "valentine's day": (2, 14),
    "valentines day": (2, 14),
}

# --------------------------------------------------------------------------- units

# name -> (dimension, factor to the base unit, offset). Base units: second, metre, gram,
# millilitre, byte, kelvin, radian, percent, one unit of each currency, one CPU.
_UNIT_GROUPS: list[tuple[str, float, float, tuple[str, ...]]] = [
    ("time", 1, 0, ("s", "sec", "secs", "second", "seconds")),
    ("time", 60, 0, ("min", "mins", "minute", "minutes")),
    ("time", 3600, 0, ("h", "hr", "hrs", "hour", "hours")),
    ("time", 86400, 0, ("d", "day", "days")),
    ("time", 604800, 0, ("wk", "wks", "week", "weeks")),
    ("time", 1209600, 0, ("fortnight", "fortnights")),
    ("time", 31536000 / 12, 0, ("mo", "month", "months")),
    ("time", 31536000, 0, ("y", "yr", "yrs", "year", "years")),
    ("time", 315360000, 0, ("decade", "decades")),
    ("length", 0.001, 0, ("mm", "millimetre", "millimetres", "millimeter", "millimeters")),
    ("length", 0.01, 0, ("cm", "centimetre", "centimetres", "centimeter", "centimeters")),
    ("length", 1, 0, ("m", "metre", "metres", "meter", "meters")),
    ("length", 1000, 0, ("km", "kms", "kilometre", "kilometres", "kilometer", "kilometers")),
    ("length", 0.0254, 0, ("inch", "inches")),
    ("length", 0.3048, 0, ("ft", "foot", "feet")),
    ("length", 0.9144, 0, ("yard", "yards")),
    ("length", 1609.344, 0, ("mi", "mile", "miles")),
    ("mass", 0.001, 0, ("mg", "milligram", "milligrams")),
    ("mass", 1, 0, ("g", "gram", "grams", "gramme", "grammes")),
    ("mass", 1000, 0, ("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms")),
    ("mass", 453.59237, 0, ("lb", "lbs", "pound", "pounds")),
    ("mass", 28.349523, 0, ("oz", "ounce", "ounces")),
    ("mass", 1e6, 0, ("tonne", "tonnes")),
    ("volume", 1, 0, ("ml", "millilitre", "millilitres", "milliliter", "milliliters")),
    ("volume", 100, 0, ("dl", "decilitre", "decilitres", "deciliter", "deciliters")),
    ("volume", 1000, 0, ("l", "litre", "litres", "liter", "liters")),
    ("volume", 240, 0, ("cup", "cups")),
    ("volume", 15, 0, ("tbsp", "tablespoon", "tablespoons")),
    ("volume", 5, 0, ("tsp", "teaspoon", "teaspoons")),
    ("volume", 473.176, 0, ("pint", "pints")),
    ("volume", 3785.41, 0, ("gallon", "gallons")),
    ("concentration", 1, 0, ("mmol", "millimole", "millimoles")),
    ("data", 1, 0, ("byte", "bytes")),
    ("data", 1e3, 0, ("kb", "kilobyte", "kilobytes")),
    ("data", 1e6, 0, ("mb", "megabyte", "megabytes")),
    ("data", 1e9, 0, ("gb", "gigabyte", "gigabytes")),
    ("data", 1e12, 0, ("tb", "terabyte", "terabytes")),
    ("data", 1024, 0, ("kib", "kibibyte", "kibibytes")),
    ("data", 1024**2, 0, ("mib", "mebibyte", "mebibytes")),
    ("data", 1024**3, 0, ("gib", "gibibyte", "gibibytes")),
    ("temperature", 1, 273.15, ("degc", "celsius", "centigrade")),
    ("temperature", 5 / 9, 273.15 - 32 * 5 / 9, ("degf", "fahrenheit")),
    ("temperature", 1, 0, ("kelvin",)),
    ("angle", math.pi / 180, 0, ("degree", "degrees", "deg")),
    ("angle", 1, 0, ("radian", "radians", "rad")),
    ("percent", 1, 0, ("%", "percent", "per cent", "pct")),
    ("cpu", 1, 0, ("cpu", "cpus", "vcpu", "vcpus", "core", "cores")),
    ("rate", 1, 0, ("bpm",)),
    ("money:usd", 1, 0, ("money:usd", "dollar", "dollars", "usd", "buck", "bucks")),
    ("money:gbp", 1, 0, ("money:gbp", "gbp", "quid", "sterling")),
    ("money:eur", 1, 0, ("money:eur", "euro", "euros", "eur")),
    ("money:jpy", 1, 0, ("money:jpy", "yen", "jpy")),
    ("money:chf", 1, 0, ("franc", "francs", "chf")),
]
UNITS: dict[str, tuple[str, float, float]] = {
    name: (dimension, factor, offset)
    for dimension, factor, offset, names in _UNIT_GROUPS
    for name in names
}
# Unit words with two readings: "pounds" is weight or sterling, "degrees" angle or heat.
AMBIGUOUS_UNITS: dict[str, tuple[str, ...]] = {
    "pound": ("mass", "money:gbp"),
    "pounds": ("mass", "money:gbp"),
    "degree": ("angle", "temperature"),
    "degrees": ("angle", "temperature"),
    "deg": ("angle", "temperature"),
}
# Letters glued to digits that name a unit ("5mg", "512Mi", "10y"). Looked up with the
# original case first, so Kubernetes' "Mi" (mebibytes) is not read as miles.
GLUED_UNIT_SUFFIXES: dict[str, str] = {
    "Mi": "mib",
    "Gi": "gib",
    "Ki": "kib",
    "MiB": "mib",
    "GiB": "gib",
    "KiB": "kib",
    "mg": "mg",
    "g": "g",
    "kg": "kg",
    "lb": "lb",
    "lbs": "lbs",
    "oz": "oz",
    "ml": "ml",
    "l": "l",
    "dl": "dl",
    "km": "km",
    "cm": "cm",
    "mm": "mm",
    "mi": "mi",
    "ft": "ft",
    "kb": "kb",
    "mb": "mb",
    "gb": "gb",
    "tb": "tb",
    "h": "h",
    "hr": "hr",
    "hrs": "hrs",
    "min": "min",
    "mins": "mins",
    "s": "s",
    "sec": "sec",
    "d": "d",
    "w": "wk",
    "wk": "wk",
    "y": "y",
    "yr": "yr",
    "yrs": "yrs",
    "c": "degc",
    "f": "degf",
}

# --------------------------------------------------------------------------- function words

# Words that carry no content of their own for comparing two questions: articles,
# pronouns, auxiliaries, question words, generic request verbs. Direction-bearing
# prepositions (from, into, before, without, ...) are deliberately NOT here.
STOPWORDS: frozenset[str] = frozenset(
    _words(
        """a an the this that these those there here it its it's i i'm i've i'd me my mine myself
    we our ours us you your yours he him his she her they them their what what's which who
    whom whose why how when where whats is are was were be been being am do does did doing
    done can could should would will shall may might must have has had having get gets got
    getting of in on at by for to with as and or but if so then than also just any some
    all each every either about via per please tell know way ways best possible able want
    need like help anyone someone something thing things would've let lets one's
    much many more very really actually exactly quite only still even yet ever
    kind sort type instead own same other another else such too"""
    )
)
# Words that frame a request without changing it ("command to ...", "steps to ...").
FILLER_WORDS: frozenset[str] = frozenset(
    _words(
        """command commands step steps instruction instructions guide tutorial way method
    option options setting settings syntax example examples quick quickly easy easily
    simple simply properly correctly correct right proper good best recommended
    typical typically usual usually normally generally roughly approximately around
    about approximate rough exact exactly precisely basically currently now today's
    still already again anymore someone anybody somebody thanks thank hi hello hey
    use using used located situated number amount"""
    )
)
# Words that open a sentence without being an entity, even when capitalised.
NOT_ENTITIES: frozenset[str] = frozenset(
    {"i", "ok", "okay", "faq", "asap", "fyi", "am", "pm", "q", "a"}
)

# --------------------------------------------------------------------------- negation

NEGATORS: frozenset[str] = frozenset(
    _words(
        """not no never without none nothing nobody neither nor cannot lack lacks lacking
    lacked avoid avoids avoiding avoided skip skipping exclude excluding except ignore
    ignoring ignores prevent preventing unable missing"""
    )
)
# Prefixes that negate a word only when the bare word appears in the other query
# ("uncooked" vs "cooked", "non-refundable" vs "refundable", "disable" is an operation).
NEGATING_PREFIXES: tuple[str, ...] = ("non", "un", "in", "im", "ir", "il", "dis")
# Words that end a negation's scope.
SCOPE_BREAKS: frozenset[str] = frozenset(
    {
        "but",
        "and",
        "or",
        "while",
        "when",
        "if",
        "so",
        "because",
        "though",
        "although",
        "which",
        "that",
        "then",
        "whereas",
        ",",
        ";",
        ".",
        "?",
        "!",
        ":",
    }
)

# --------------------------------------------------------------------------- direction

SOURCE_MARKERS: frozenset[str] = frozenset({"from", "out of", "off of", "away from"})
TARGET_MARKERS: frozenset[str] = frozenset({"to", "into", "onto", "towards", "toward", "in to"})
# Words that relate two slots, so that swapping what sits on either side of them changes
# the question ("A to B", "A for B", "A when B", "A above B").
RELATION_MARKERS: frozenset[str] = frozenset(
    _words(
        """from to into onto for than over above below under instead when vs versus before after
    replace replaces replacing but while whereas rather except not"""
    )
)

# Contrast sets. Each set is a tuple of groups; words within a group are interchangeable,
# words from different groups of one set name different things. Two queries that each use
# a group of a set the other does not use are asking different questions.
DIRECTION_CONTRASTS: tuple[tuple[frozenset[str], ...], ...] = tuple(
    tuple(frozenset(group.split()) for group in contrast)
    for contrast in (
        ("up upward upwards upstairs", "down downward downwards downstairs"),
        ("upgrade", "downgrade"),
        ("upload", "download"),
        ("increase raise boost grow", "decrease reduce lower cut shrink"),
        ("rise", "fall drop"),
        ("above", "below beneath"),
        ("over", "under"),
        ("more", "less fewer"),
        ("most maximum max", "least fewest minimum min"),
        ("largest biggest", "smallest tiniest"),
        ("greatest", "least"),
        ("larger bigger greater", "smaller"),
        ("highest", "lowest"),
        ("higher", "lower"),
        ("longest", "shortest"),
        ("longer", "shorter"),
        ("closest nearest", "farthest furthest"),
        ("closer nearer", "farther further"),
        ("earliest", "latest"),
        ("earlier", "later"),
        ("early", "late"),
        ("before prior", "after"),
        ("first", "last"),
        ("oldest", "newest latest"),
        ("older", "newer"),
        ("previous prev preceding", "next following"),
        ("ascending", "descending"),
        ("inbound incoming", "outbound outgoing"),
        ("input", "output"),
        ("import", "export"),
        ("send", "receive"),
        ("push", "pull"),
        ("north northern", "south southern"),
        ("east eastern", "west western"),
        ("left", "right"),
        ("top", "bottom"),
        ("forward forwards", "backward backwards"),
        ("inside", "outside"),
        ("internal", "external"),
        ("interior", "exterior"),
        ("inner", "outer"),
        ("positive", "negative"),
        ("plus", "minus"),
        ("source", "target destination"),
        ("succeed succeeded successor", "precede preceded predecessor"),
        ("parent", "child"),
        ("boiling boil", "freezing freeze"),
        ("hot", "cold"),
        ("warm", "cool"),
        ("wet", "dry"),
        ("heavier", "lighter"),
        ("faster", "slower"),
        ("cheaper", "dearer"),
        ("cheapest", "priciest"),
        ("weekday weekdays", "weekend weekends"),
        ("morning", "afternoon", "evening", "night overnight"),
        ("today", "tomorrow", "yesterday"),
        ("daily", "weekly", "monthly", "annual yearly annually", "hourly"),
        ("spring", "summer", "autumn fall", "winter"),
        ("am", "pm"),
    )
)
OPERATION_CONTRASTS: tuple[tuple[frozenset[str], ...], ...] = tuple(
    tuple(frozenset(group.split()) for group in contrast)
    for contrast in (
        (
            "create add insert new register",
            "delete remove erase drop destroy purge unregister deregister",
        ),
        ("install", "uninstall remove"),
        ("enable activate", "disable deactivate"),
        ("encrypt", "decrypt"),
        ("encode", "decode"),
        ("compress", "decompress"),
        ("zip", "unzip"),
        ("serialize serialise", "deserialize deserialise"),
        ("pack", "unpack"),
        ("lock", "unlock"),
        ("mount", "unmount"),
        ("attach reattach", "detach"),
        ("subscribe", "unsubscribe"),
        ("follow", "unfollow"),
        ("block", "unblock"),
        ("mute", "unmute"),
        ("pin", "unpin"),
        ("archive", "unarchive"),
        ("hide", "show reveal"),
        ("freeze", "thaw unfreeze"),
        ("deposit", "withdraw"),
        ("buy purchase", "sell"),
        ("borrow", "lend"),
        ("grant", "revoke"),
        ("allow permit", "deny forbid prohibit"),
        ("accept approve", "reject decline deny"),
        ("open", "close shut"),
        ("connect", "disconnect"),
        ("join", "leave"),
        ("expand", "collapse"),
        ("start begin resume", "stop end pause"),
        ("merge combine", "split separate"),
        ("thicken", "thin"),
        ("include", "exclude"),
        ("earn", "redeem spend"),
        ("arrive arrival", "depart departure"),
        ("login signin", "logout signout"),
        ("inhale", "exhale"),
        ("melt", "temper"),
        ("acquire acquiring", "release"),
        ("mean average", "median", "mode", "variance", "deviation"),
        ("derivative differentiate", "integral integrate"),
        ("sum", "product", "difference", "quotient"),
        ("multiply", "divide"),
        ("add", "subtract"),
        ("square", "cube"),
        ("sine sin", "cosine cos", "tangent tan"),
        ("permutation arrange", "combination choose"),
        ("simple", "compound"),
        ("volume", "area"),
        ("slope gradient", "distance", "midpoint"),
        ("multiple", "divisor"),
        ("area", "perimeter circumference"),
        ("radius", "diameter"),
        ("inverse", "determinant", "transpose"),
        (
            "boil boiled",
            "fry fried",
            "bake baked",
            "roast roasted",
            "grill grilled",
            "steam steamed",
            "poach poached",
        ),
        ("soft", "hard"),
        ("raw uncooked", "cooked"),
        ("fresh", "frozen"),
        ("warning", "error"),
        ("consumer", "producer"),
        ("client", "server"),
        ("read", "write"),
        ("sync", "async"),
        ("public", "private"),
        ("static", "dynamic"),
        ("local", "remote"),
        ("debit", "credit"),
        ("income", "expense"),
        ("profit", "loss"),
        ("short-term", "long-term"),
        ("male man men", "female woman women"),
        ("adult", "child children kid kids infant baby newborn"),
    )
)

# --------------------------------------------------------------------------- aliases

# Word groups that name the same thing: used to match content words across a rewording.
SYNONYM_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "delete remove erase",
        "slope gradient",
        "median middle",
        "big large huge",
        "bigger larger",
        "biggest largest",
        "small little tiny",
        "fast quick rapid speedy",
        "faster quicker",
        "start begin",
        "stop halt",
        "buy purchase",
        "cheap inexpensive",
        "cost price fee",
        "car auto automobile vehicle",
        "fridge refrigerator",
        "movie film",
        "photo picture image",
        "show display list print",
        "error exception",
        "fix repair resolve",
        "find locate",
        "require need mandatory compulsory required",
        "allow permit let",
        "change modify alter edit update",
        "child kid",
        "doctor physician gp",
        "medicine medication drug",
        "money funds cash",
        "trip journey",
        "bag luggage baggage suitcase",
        "hotel accommodation lodging",
        "maximum max",
        "minimum min",
        "annual yearly",
        "cancel terminate",
        "shop store",
        "repo repository",
        "dir directory folder",
        "config configuration",
        "env environment",
        "db database",
        "app application",
        "pic photo",
        "cert certificate",
        "auth authentication",
        "password passcode",
    )
)
# Names and abbreviations that refer to the same entity (folded). Each group is
# interchangeable; used by the entity and identifier guards.
ENTITY_ALIASES: tuple[frozenset[str], ...] = tuple(
    frozenset(group.split())
    for group in (
        "kubernetes k8s kube",
        "postgres postgresql psql pg",
        "javascript js",
        "typescript ts tsc",
        "java jdk jre openjdk",
        "python py cpython",
        "golang go",
        "macos osx mac",
        "ios iphone",
        "amex american-express",
        "2fa two-factor mfa multi-factor",
        "uk britain british united-kingdom england",
        "us usa american united-states",
        "eu europe european",
        "nyc new-york",
        "la los-angeles",
        "sf san-francisco",
        "ireland irish",
        "netherlands dutch holland",
        "switzerland swiss",
        "covid covid-19 coronavirus sars-cov-2",
        "acetaminophen paracetamol tylenol",
        "ibuprofen advil nurofen",
        "hsa health-savings-account",
        "ira individual-retirement",
        "gcp google-cloud",
        "aws amazon-web-services",
        "k8s kubectl",
        "ci continuous-integration",
        "ssl tls",
        "mongo mongodb",
        "node nodejs node.js",
        "vscode vs-code visual-studio-code",
        "gh github",
        "gitlab gl",
    )
)
# Endings stripped to meet a country and its adjective ("Canada"/"Canadian").
DEMONYM_SUFFIXES: tuple[str, ...] = (
    "en",
    "ians",
    "ian",
    "ans",
    "an",
    "ese",
    "ish",
    "ia",
    "a",
    "o",
    "y",
    "e",
    "i",
)
