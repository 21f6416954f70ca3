"""translation: short everyday sentences between English and French, Spanish or German.

The phrase material is written here by hand (sentence frames with slot fillers, each given in all four
languages, plus fixed phrases); nothing is downloaded. Fillers and names are partitioned between
splits. The reference is the target sentence.
"""

from __future__ import annotations

import random

from .base import NAMES, pick, pool, templates

LANGS = {"en": "English", "fr": "French", "es": "Spanish", "de": "German"}

PLACES = [("the station", "la gare", "la estación", "der Bahnhof"), ("the museum", "le musée", "el museo", "das Museum"),
          ("the hotel", "l'hôtel", "el hotel", "das Hotel"), ("the bank", "la banque", "el banco", "die Bank"),
          ("the pharmacy", "la pharmacie", "la farmacia", "die Apotheke"), ("the beach", "la plage", "la playa", "der Strand"),
          ("the library", "la bibliothèque", "la biblioteca", "die Bibliothek"), ("the airport", "l'aéroport", "el aeropuerto", "der Flughafen"),
          ("the bakery", "la boulangerie", "la panadería", "die Bäckerei"), ("the market", "le marché", "el mercado", "der Markt"),
          ("the church", "l'église", "la iglesia", "die Kirche"), ("the hospital", "l'hôpital", "el hospital", "das Krankenhaus"),
          ("the exit", "la sortie", "la salida", "der Ausgang"), ("the post office", "la poste", "la oficina de correos", "die Post"),
          ("the school", "l'école", "la escuela", "die Schule"), ("the park", "le parc", "el parque", "der Park")]
ORDERS = [("a coffee", "un café", "un café", "einen Kaffee"), ("a tea", "un thé", "un té", "einen Tee"),
          ("a glass of water", "un verre d'eau", "un vaso de agua", "ein Glas Wasser"), ("a beer", "une bière", "una cerveza", "ein Bier"),
          ("an orange juice", "un jus d'orange", "un zumo de naranja", "einen Orangensaft"), ("a salad", "une salade", "una ensalada", "einen Salat"),
          ("the bill", "l'addition", "la cuenta", "die Rechnung"), ("a piece of cake", "une part de gâteau", "un trozo de tarta", "ein Stück Kuchen"),
          ("a room for two nights", "une chambre pour deux nuits", "una habitación para dos noches", "ein Zimmer für zwei Nächte"),
          ("a sandwich", "un sandwich", "un sándwich", "ein Sandwich"), ("a map of the city", "un plan de la ville", "un mapa de la ciudad", "einen Stadtplan")]
THINGS = [("the ticket", "le billet", "el billete", "die Fahrkarte"), ("the room", "la chambre", "la habitación", "das Zimmer"),
          ("the book", "le livre", "el libro", "das Buch"), ("the bicycle", "le vélo", "la bicicleta", "das Fahrrad"),
          ("the coat", "le manteau", "el abrigo", "der Mantel"), ("this bag", "ce sac", "este bolso", "diese Tasche"),
          ("the map", "la carte", "el mapa", "die Karte"), ("the umbrella", "le parapluie", "el paraguas", "der Regenschirm"),
          ("the watch", "la montre", "el reloj", "die Uhr"), ("the lamp", "la lampe", "la lámpara", "die Lampe"),
          ("the chair", "la chaise", "la silla", "der Stuhl"), ("the shirt", "la chemise", "la camisa", "das Hemd")]
OBJECTS = [("the book", "le livre", "el libro", "das Buch"), ("the key", "la clé", "la llave", "der Schlüssel"),
           ("the phone", "le téléphone", "el teléfono", "das Handy"), ("the letter", "la lettre", "la carta", "der Brief"),
           ("the newspaper", "le journal", "el periódico", "die Zeitung"), ("the map", "la carte", "el mapa", "die Karte"),
           ("the wallet", "le portefeuille", "la cartera", "die Geldbörse"), ("the pen", "le stylo", "el bolígrafo", "der Stift"),
           ("the ticket", "le billet", "el billete", "die Fahrkarte"), ("the plate", "l'assiette", "el plato", "der Teller")]
VEHICLES = [("The train", "Le train", "El tren", "Der Zug"), ("The bus", "Le bus", "El autobús", "Der Bus"),
            ("The ferry", "Le ferry", "El ferri", "Die Fähre"), ("The tram", "Le tram", "El tranvía", "Die Straßenbahn")]
DAYS = [("Monday", "lundi", "lunes", "Montag"), ("Tuesday", "mardi", "martes", "Dienstag"), ("Wednesday", "mercredi", "miércoles", "Mittwoch"),
        ("Thursday", "jeudi", "jueves", "Donnerstag"), ("Friday", "vendredi", "viernes", "Freitag"), ("Saturday", "samedi", "sábado", "Samstag"),
        ("Sunday", "dimanche", "domingo", "Sonntag")]
RELATIVES = [("brother", "Mon frère", "Mi hermano", "Mein Bruder"), ("sister", "Ma sœur", "Mi hermana", "Meine Schwester"),
             ("father", "Mon père", "Mi padre", "Mein Vater"), ("mother", "Ma mère", "Mi madre", "Meine Mutter"),
             ("uncle", "Mon oncle", "Mi tío", "Mein Onkel"), ("aunt", "Ma tante", "Mi tía", "Meine Tante"),
             ("grandmother", "Ma grand-mère", "Mi abuela", "Meine Großmutter"), ("best friend", "Mon meilleur ami", "Mi mejor amigo", "Mein bester Freund")]
CITIES = [("London", "Londres", "Londres", "London"), ("Paris", "Paris", "París", "Paris"), ("Berlin", "Berlin", "Berlín", "Berlin"),
          ("Rome", "Rome", "Roma", "Rom"), ("Lisbon", "Lisbonne", "Lisboa", "Lissabon"), ("Vienna", "Vienne", "Viena", "Wien"),
          ("Madrid", "Madrid", "Madrid", "Madrid"), ("Munich", "Munich", "Múnich", "München"), ("Geneva", "Genève", "Ginebra", "Genf"),
          ("Brussels", "Bruxelles", "Bruselas", "Brüssel"), ("Athens", "Athènes", "Atenas", "Athen"), ("Warsaw", "Varsovie", "Varsovia", "Warschau")]
LANGUAGES = [("French", "français", "francés", "Französisch"), ("Spanish", "espagnol", "español", "Spanisch"), ("German", "allemand", "alemán", "Deutsch"),
             ("Italian", "italien", "italiano", "Italienisch"), ("Japanese", "japonais", "japonés", "Japanisch"), ("Portuguese", "portugais", "portugués", "Portugiesisch"),
             ("Russian", "russe", "ruso", "Russisch"), ("Arabic", "arabe", "árabe", "Arabisch"), ("Chinese", "chinois", "chino", "Chinesisch"), ("English", "anglais", "inglés", "Englisch")]
WORKPLACES = [("a bank", "dans une banque", "en un banco", "in einer Bank"), ("a hospital", "dans un hôpital", "en un hospital", "in einem Krankenhaus"),
              ("a school", "dans une école", "en una escuela", "in einer Schule"), ("a bakery", "dans une boulangerie", "en una panadería", "in einer Bäckerei"),
              ("a museum", "dans un musée", "en un museo", "in einem Museum"), ("a hotel", "dans un hôtel", "en un hotel", "in einem Hotel"),
              ("a shop", "dans un magasin", "en una tienda", "in einem Geschäft"), ("an office", "dans un bureau", "en una oficina", "in einem Büro"),
              ("a restaurant", "dans un restaurant", "en un restaurante", "in einem Restaurant"), ("a library", "dans une bibliothèque", "en una biblioteca", "in einer Bibliothek")]
FIXED = [("Good morning.", "Bonjour.", "Buenos días.", "Guten Morgen."), ("Thank you very much.", "Merci beaucoup.", "Muchas gracias.", "Vielen Dank."),
         ("Where are the toilets?", "Où sont les toilettes?", "¿Dónde están los baños?", "Wo sind die Toiletten?"),
         ("I don't understand.", "Je ne comprends pas.", "No entiendo.", "Ich verstehe nicht."),
         ("Can you speak more slowly?", "Pouvez-vous parler plus lentement?", "¿Puede hablar más despacio?", "Können Sie langsamer sprechen?"),
         ("It is raining today.", "Il pleut aujourd'hui.", "Hoy llueve.", "Heute regnet es."),
         ("I am hungry.", "J'ai faim.", "Tengo hambre.", "Ich habe Hunger."), ("What time is it?", "Quelle heure est-il?", "¿Qué hora es?", "Wie spät ist es?"),
         ("See you tomorrow.", "À demain.", "Hasta mañana.", "Bis morgen."), ("I am tired.", "Je suis fatigué.", "Estoy cansado.", "Ich bin müde."),
         ("The weather is nice.", "Il fait beau.", "Hace buen tiempo.", "Das Wetter ist schön."), ("Do you speak English?", "Parlez-vous anglais?", "¿Habla inglés?", "Sprechen Sie Englisch?"),
         ("My name is Anna.", "Je m'appelle Anna.", "Me llamo Anna.", "Ich heiße Anna."), ("I live in a small town.", "J'habite dans une petite ville.", "Vivo en un pueblo pequeño.", "Ich wohne in einer kleinen Stadt."),
         ("The door is closed.", "La porte est fermée.", "La puerta está cerrada.", "Die Tür ist geschlossen."), ("We are late.", "Nous sommes en retard.", "Llegamos tarde.", "Wir sind spät dran."),
         ("Happy birthday!", "Joyeux anniversaire!", "¡Feliz cumpleaños!", "Alles Gute zum Geburtstag!"), ("I like this song.", "J'aime cette chanson.", "Me gusta esta canción.", "Ich mag dieses Lied."),
         ("The shop opens at nine.", "Le magasin ouvre à neuf heures.", "La tienda abre a las nueve.", "Das Geschäft öffnet um neun Uhr."),
         ("Please close the window.", "Fermez la fenêtre, s'il vous plaît.", "Cierre la ventana, por favor.", "Bitte schließen Sie das Fenster.")]


def _de_acc(de: str) -> str:
    return "den " + de[4:] if de.startswith("der ") else de


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _frames(rng, split):
    """(English, French, Spanish, German), the frame name and the material key."""
    frame = rng.choice(["where", "looking", "leaves", "meet", "lives", "order", "cost", "age", "speaks", "works", "table", "fixed"])
    if frame == "where":
        x = rng.choice(pool(PLACES, split, "tr-place"))
        return (f"Where is {x[0]}?", f"Où est {x[1]}?", f"¿Dónde está {x[2]}?", f"Wo ist {x[3]}?"), frame
    if frame == "looking":
        x = rng.choice(pool(PLACES, split, "tr-place"))
        return (f"I am looking for {x[0]}.", f"Je cherche {x[1]}.", f"Busco {x[2]}.", f"Ich suche {_de_acc(x[3])}."), frame
    if frame == "leaves":
        v, n = rng.choice(VEHICLES), rng.randint(2, 11)
        return (f"{v[0]} leaves at {n} o'clock.", f"{v[1]} part à {n} heures.", f"{v[2]} sale a las {n}.",
                f"{v[3]} fährt um {n} Uhr ab."), frame
    if frame == "meet":
        d = rng.choice(DAYS)
        return (f"We meet on {d[0]}.", f"On se retrouve {d[1]}.", f"Nos vemos el {d[2]}.", f"Wir treffen uns am {d[3]}."), frame
    if frame == "lives":
        r, c = rng.choice(RELATIVES), rng.choice(pool(CITIES, split, "tr-city"))
        return (f"My {r[0]} lives in {c[0]}.", f"{r[1]} habite à {c[1]}.", f"{r[2]} vive en {c[2]}.", f"{r[3]} wohnt in {c[3]}."), frame
    if frame == "order":
        x = rng.choice(pool(ORDERS, split, "tr-order"))
        return (f"I would like {x[0]}, please.", f"Je voudrais {x[1]}, s'il vous plaît.", f"Quisiera {x[2]}, por favor.",
                f"Ich hätte gern {x[3]}, bitte."), frame
    if frame == "cost":
        x = rng.choice(pool(THINGS, split, "tr-thing"))
        return (f"How much does {x[0]} cost?", f"Combien coûte {x[1]}?", f"¿Cuánto cuesta {x[2]}?", f"Wie viel kostet {x[3]}?"), frame
    if frame == "age":
        name, n = rng.choice(pool(NAMES, split, "name")), rng.randint(2, 90)
        return (f"{name} is {n} years old.", f"{name} a {n} ans.", f"{name} tiene {n} años.", f"{name} ist {n} Jahre alt."), frame
    if frame == "speaks":
        name, lang = rng.choice(pool(NAMES, split, "name")), rng.choice(LANGUAGES)
        return (f"{name} speaks {lang[0]}.", f"{name} parle {lang[1]}.", f"{name} habla {lang[2]}.", f"{name} spricht {lang[3]}."), frame
    if frame == "works":
        name, w = rng.choice(pool(NAMES, split, "name")), rng.choice(WORKPLACES)
        return (f"{name} works in {w[0]}.", f"{name} travaille {w[1]}.", f"{name} trabaja {w[2]}.", f"{name} arbeitet {w[3]}."), frame
    if frame == "table":
        x = rng.choice(pool(OBJECTS, split, "tr-object"))
        return (f"{_cap(x[0])} is on the table.", f"{_cap(x[1])} est sur la table.", f"{_cap(x[2])} está sobre la mesa.",
                f"{_cap(x[3])} liegt auf dem Tisch."), frame
    return rng.choice(pool(FIXED, split, "tr-fixed")), frame


TEMPLATES = templates("translation", train={
    "to": "Translate to {tgt}: {text}",
    "sentence": "Translate the following {src} sentence into {tgt}.\n{text}",
    "say": "How do you say \"{text}\" in {tgt}?",
    "pair": "{src}: {text}\n{tgt}:",
}, eval={
    "would": "What would \"{text}\" be in {tgt}?",
    "forme": "Could you put this {src} sentence into {tgt} for me? {text}",
})


def generate(rng: random.Random, split: str) -> dict:
    texts, frame = _frames(rng, split)
    by_lang = dict(zip(["en", "fr", "es", "de"], texts))
    other = rng.choice(["fr", "es", "de"])
    src, tgt = ("en", other) if rng.random() < 0.6 else (other, "en")
    t = pick(rng, TEMPLATES, split)
    prompt = t.text.format(src=LANGS[src], tgt=LANGS[tgt], text=by_lang[src])
    return {"prompt": prompt, "reference": by_lang[tgt], "template": f"{t.id}+{frame}",
            "source": f"generated:phrases/{frame}", "check": {"source_text": by_lang[src], "target_lang": tgt}}
