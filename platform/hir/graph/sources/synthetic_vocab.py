"""Words of the synthetic ecosystem's planted interests: 8 coarse themes × 6 fine interests.

Each fine interest has its own short word list, so product and ad titles written from it carry
its meaning into the text embeddings. Themes beyond this table reuse it with a numeric suffix.
"""

THEMES: dict[str, dict[str, list[str]]] = {
    "sports": {
        "running": ["marathon", "trail", "sneaker", "pace", "stride"],
        "cycling": ["bike", "pedal", "helmet", "gravel", "saddle"],
        "swimming": ["goggles", "pool", "freestyle", "swimsuit", "lap"],
        "yoga": ["mat", "pose", "stretch", "breathing", "balance"],
        "football": ["soccer", "goal", "cleats", "jersey", "striker"],
        "climbing": ["rope", "harness", "boulder", "chalk", "carabiner"],
    },
    "beauty": {
        "skincare": ["serum", "moisturizer", "cleanser", "retinol", "hydrating"],
        "makeup": ["lipstick", "mascara", "foundation", "eyeliner", "blush"],
        "haircare": ["shampoo", "conditioner", "curl", "keratin", "scalp"],
        "fragrance": ["perfume", "cologne", "floral", "musk", "citrus"],
        "nails": ["polish", "manicure", "gel", "cuticle", "lacquer"],
        "grooming": ["razor", "beard", "shave", "trimmer", "aftershave"],
    },
    "electronics": {
        "phones": ["smartphone", "charger", "camera", "battery", "screen"],
        "audio": ["headphones", "speaker", "earbuds", "bass", "wireless"],
        "computers": ["laptop", "keyboard", "monitor", "processor", "ssd"],
        "photography": ["lens", "tripod", "mirrorless", "shutter", "flash"],
        "smarthome": ["thermostat", "doorbell", "assistant", "bulb", "sensor"],
        "wearables": ["smartwatch", "tracker", "heartrate", "strap", "steps"],
    },
    "home": {
        "kitchen": ["skillet", "knife", "blender", "cookware", "spatula"],
        "furniture": ["sofa", "table", "chair", "shelf", "wardrobe"],
        "garden": ["seeds", "planter", "hose", "compost", "shovel"],
        "bedding": ["pillow", "duvet", "sheets", "mattress", "blanket"],
        "cleaning": ["vacuum", "mop", "detergent", "sponge", "scrub"],
        "decor": ["candle", "vase", "frame", "rug", "lamp"],
    },
    "fashion": {
        "dresses": ["gown", "maxi", "cocktail", "silk", "pleated"],
        "denim": ["jeans", "jacket", "indigo", "slim", "raw"],
        "shoes": ["boots", "heels", "loafers", "sandals", "leather"],
        "accessories": ["handbag", "belt", "scarf", "sunglasses", "wallet"],
        "outerwear": ["parka", "raincoat", "puffer", "trench", "fleece"],
        "jewelry": ["necklace", "ring", "bracelet", "earrings", "pendant"],
    },
    "travel": {
        "flights": ["airline", "boarding", "airport", "layover", "economy"],
        "hotels": ["suite", "resort", "booking", "checkin", "concierge"],
        "luggage": ["suitcase", "carryon", "backpack", "duffel", "wheels"],
        "camping": ["tent", "sleepingbag", "campfire", "lantern", "stove"],
        "cruises": ["ship", "deck", "cabin", "port", "ocean"],
        "roadtrips": ["rental", "highway", "motel", "map", "fuel"],
    },
    "food": {
        "coffee": ["espresso", "beans", "roast", "grinder", "latte"],
        "baking": ["flour", "yeast", "oven", "dough", "pastry"],
        "snacks": ["chips", "cookies", "crackers", "popcorn", "pretzel"],
        "wine": ["vineyard", "merlot", "bottle", "cork", "vintage"],
        "vegan": ["tofu", "plantbased", "lentils", "oatmilk", "quinoa"],
        "spices": ["pepper", "cumin", "paprika", "cinnamon", "saffron"],
    },
    "gaming": {
        "consoles": ["controller", "console", "joystick", "cartridge", "handheld"],
        "pcgaming": ["graphics", "rgb", "mouse", "framerate", "headset"],
        "boardgames": ["dice", "cards", "strategy", "tabletop", "meeple"],
        "puzzles": ["jigsaw", "crossword", "riddle", "pieces", "sudoku"],
        "esports": ["tournament", "league", "stream", "ranked", "team"],
        "retro": ["arcade", "pixel", "cabinet", "classic", "emulator"],
    },
}

BRAND_SYLLABLES = ["zo", "ra", "ven", "ka", "lu", "mi", "tor", "ex", "pa", "qui", "lo", "dra", "fen", "sol", "vi", "nor"]


def interest_table(coarse: int, fine: int) -> tuple[list[str], list[list[str]], list[list[list[str]]]]:
    """Coarse names, fine names per coarse and word lists per fine interest, for any grid size."""
    themes = list(THEMES.items())
    coarse_names, fine_names, words = [], [], []
    for c in range(coarse):
        theme, subs = themes[c % len(themes)]
        suffix = "" if c < len(themes) else str(c // len(themes) + 1)
        coarse_names.append(theme + suffix)
        sub_items = list(subs.items())
        fine_names.append([sub_items[f % len(sub_items)][0] + suffix + ("" if f < len(sub_items) else str(f // len(sub_items) + 1)) for f in range(fine)])
        words.append([list(sub_items[f % len(sub_items)][1]) for f in range(fine)])
    return coarse_names, fine_names, words
